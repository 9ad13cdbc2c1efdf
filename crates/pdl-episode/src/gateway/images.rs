//! The most input tokens an image in a request can be billed: the bound the
//! gateway reserves for each image part before a call goes upstream.
//!
//! A provider bills an image by its pixels after its own resizing, never by
//! the bytes that encode it: a 271-byte PNG of 768 × 2048 pixels is eight
//! 512-pixel tiles, 48 169 input tokens on gpt-4o-mini. So the JSON bytes of a
//! request bound its text, not its images; each image part adds the largest
//! amount the upstream's model can bill for one image ([`image_bound`]).
//!
//! The bound is the worst case of every known model family of the API the
//! upstream speaks, unless the table below knows the exact model the request
//! goes to (the campaign's, not the agent's). A model is known only by its
//! exact name or a dated snapshot of it (`gpt-4o-2024-08-06`,
//! `claude-sonnet-4-20250514`), never by a prefix: `gpt-4o-mini` is not
//! `gpt-4o`, and `claude-opus-4-7` is not `claude-opus-4`. Anything else gets
//! the family-wide worst case, so a new model can only be over-reserved.
//!
//! # OpenAI (Chat Completions)
//!
//! Tile families (the OpenAI vision guide, "Calculating costs"): with
//! `detail: "low"` an image costs a fixed base; otherwise it is scaled down to
//! fit 2048 × 2048, then down so that its shortest side is at most 768, and
//! each 512-pixel tile of the result costs a fixed amount on top of the base.
//! Scaling only ever shrinks, so the long side is at most 2048 (4 tiles) and
//! the short side at most 768 (2 tiles): at most 8 tiles.
//!
//! | family | base | per tile | high (8 tiles) | low |
//! |---|---|---|---|---|
//! | gpt-4o, gpt-4.1, gpt-4-turbo | 85 | 170 | 1 445 | 85 |
//! | gpt-4o-mini | 2 833 | 5 667 | **48 169** | 2 833 |
//!
//! Patch families (gpt-4.1-mini, gpt-4.1-nano and later small models): 32-pixel
//! patches, at most 1 536 per image after scaling, times a per-model factor
//! (1.62 for gpt-4.1-mini, 2.46 for gpt-4.1-nano): at most 2 489 and 3 779. The
//! guide gives them no cheaper `low` detail, so their cap holds for any detail.
//!
//! Worst case of the API: 48 169 per image (gpt-4o-mini's eight tiles), and
//! 3 779 with `detail: "low"` (gpt-4.1-nano's patch cap, above gpt-4o-mini's
//! 2 833 low-detail price). An image part without an explicit `detail: "low"`
//! (`auto`, `high`, a value the gateway does not know, or an undocumented part
//! shape) gets the high bound.
//!
//! # Anthropic (Messages)
//!
//! The Anthropic vision guide bills an image about `width × height / 750`
//! tokens (now written as one token per 28 × 28-pixel patch, after padding to a
//! multiple of 28) and shrinks larger images to the model's native resolution.
//! The long-standing figure of "about 1 600 tokens" per image is the area
//! threshold of the models whose long edge is capped at 1 568 pixels (Claude 3
//! to 4.6); it is approximate (the guide's own 784 × 1 568 example is 1 639
//! tokens), and Claude Opus 4.7 raised the long edge to 2 576 pixels (about
//! 3.75 megapixels, some 4 800 tokens). So the bound relies on the long edge
//! alone, whatever the area rule: a square of that edge.
//!
//! - Long edge 2 576 (the worst case of the API, and any model not listed):
//!   2 576² / 750 = **8 848** tokens (the patch count, 92² = 8 464, is lower).
//! - Long edge 1 568 (the listed Claude 3 to 4.5 models): 1 568² / 750 = 3 279
//!   tokens (56² = 3 136 patches).

use serde_json::{Map, Value};

use crate::provider::ApiKind;

/// An OpenAI tile-family image: `base + per_tile × 8` (8 tiles at most).
const fn tiles(base: u64, per_tile: u64) -> u64 {
    base + per_tile * 8
}

/// gpt-4o-mini with `detail: "high"` (or `auto`): the OpenAI worst case.
const OPENAI_WORST_HIGH: u64 = tiles(2_833, 5_667);

/// The most an image with `detail: "low"` costs on any OpenAI family: the
/// patch cap of gpt-4.1-nano, ⌈1 536 × 2.46⌉, which ignores the detail level.
const OPENAI_WORST_LOW: u64 = 3_779;

/// Any Anthropic model: a square of Claude Opus 4.7's 2 576-pixel long edge,
/// ⌈2 576² / 750⌉.
const ANTHROPIC_WORST: u64 = 8_848;

/// Anthropic models whose long edge is 1 568 pixels: ⌈1 568² / 750⌉.
const ANTHROPIC_1568: u64 = 3_279;

/// OpenAI models the guide prices exactly: (name, high, low).
const OPENAI_MODELS: &[(&str, u64, u64)] = &[
    ("gpt-4o", tiles(85, 170), 85),
    ("gpt-4.1", tiles(85, 170), 85),
    ("gpt-4-turbo", tiles(85, 170), 85),
    ("gpt-4o-mini", OPENAI_WORST_HIGH, 2_833),
    // Patch families: ⌈1 536 × factor⌉, whatever the detail.
    ("gpt-4.1-mini", 2_489, 2_489),
    ("gpt-4.1-nano", 3_779, 3_779),
];

/// Anthropic models with the 1 568-pixel long edge.
const ANTHROPIC_1568_MODELS: &[&str] = &[
    "claude-3-haiku",
    "claude-3-sonnet",
    "claude-3-opus",
    "claude-3-5-haiku",
    "claude-3-5-sonnet",
    "claude-3-7-sonnet",
    "claude-sonnet-4",
    "claude-opus-4",
    "claude-opus-4-1",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
    "claude-opus-4-5",
];

/// True when `name` is `family` itself or a dated snapshot of it:
/// `family-YYYY-MM-DD` (OpenAI), `family-YYYYMMDD` or `family-latest`
/// (Anthropic).
fn is_model(name: &str, family: &str) -> bool {
    let Some(rest) = name.strip_prefix(family) else {
        return false;
    };
    let Some(suffix) = rest.strip_prefix('-') else {
        return rest.is_empty();
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let dashed = {
        let parts: Vec<&str> = suffix.split('-').collect();
        parts.len() == 3
            && parts.iter().all(|p| digits(p))
            && [4, 2, 2] == [parts[0].len(), parts[1].len(), parts[2].len()]
    };
    suffix == "latest" || (suffix.len() == 8 && digits(suffix)) || dashed
}

/// The model name without a `provider/` prefix, lowercased.
fn bare(model: &str) -> String {
    model
        .rsplit('/')
        .next()
        .unwrap_or(model)
        .to_ascii_lowercase()
}

/// True when an image part asks for low detail (`image_url.detail`, or
/// `detail` on the part itself as in `input_image`).
fn low_detail(part: &Map<String, Value>) -> bool {
    let detail = part
        .get("image_url")
        .and_then(|u| u.get("detail"))
        .or_else(|| part.get("detail"))
        .and_then(Value::as_str);
    detail == Some("low")
}

/// The most input tokens the image part `part` can be billed when the request
/// goes to `model` on an `api` upstream. See the [module docs](self).
pub(crate) fn image_bound(api: ApiKind, model: &str, part: &Map<String, Value>) -> u64 {
    let name = bare(model);
    match api {
        ApiKind::OpenAi => {
            let low = low_detail(part);
            let known = OPENAI_MODELS
                .iter()
                .find(|(family, _, _)| is_model(&name, family));
            match (known, low) {
                (Some((_, _, low_bound)), true) => *low_bound,
                (Some((_, high_bound, _)), false) => *high_bound,
                (None, true) => OPENAI_WORST_LOW,
                (None, false) => OPENAI_WORST_HIGH,
            }
        }
        ApiKind::Anthropic => {
            if ANTHROPIC_1568_MODELS
                .iter()
                .any(|family| is_model(&name, family))
            {
                ANTHROPIC_1568
            } else {
                ANTHROPIC_WORST
            }
        }
    }
}

/// True for an object of a request's messages that is an image, in any of the
/// shapes a provider may take: a part whose `type` names an image
/// (`image_url`, `image`, `input_image`, ...), or any object with an
/// `image_url` or `image` field (OpenAI also takes `{"image": <base64>}`
/// without a `type`, and bills it like a high-detail image).
pub(crate) fn is_image_part(object: &Map<String, Value>) -> bool {
    object
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t.contains("image"))
        || object.contains_key("image_url")
        || object.contains_key("image")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn part(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn the_constants_follow_the_published_formulas() {
        assert_eq!(OPENAI_WORST_HIGH, 48_169);
        assert_eq!(tiles(85, 170), 1_445);
        assert_eq!(OPENAI_WORST_LOW, (1_536.0f64 * 2.46).ceil() as u64);
        assert_eq!(2_489, (1_536.0f64 * 1.62).ceil() as u64);
        assert_eq!(ANTHROPIC_WORST, (2_576u64 * 2_576).div_ceil(750));
        assert_eq!(ANTHROPIC_1568, (1_568u64 * 1_568).div_ceil(750));
        // Both above the patch counts of the same squares.
        assert!(ANTHROPIC_WORST >= (2_576u64 / 28).pow(2));
        assert!(ANTHROPIC_1568 >= (1_568u64 / 28).pow(2));
        // The worst case of each API is no smaller than any listed model.
        for (_, high, low) in OPENAI_MODELS {
            assert!(*high <= OPENAI_WORST_HIGH && *low <= OPENAI_WORST_LOW);
        }
    }

    #[test]
    fn openai_images_get_the_worst_case_unless_the_model_is_known() {
        let high =
            part(json!({"type": "image_url", "image_url": {"url": "data:,", "detail": "high"}}));
        let auto = part(json!({"type": "image_url", "image_url": {"url": "data:,"}}));
        let low =
            part(json!({"type": "image_url", "image_url": {"url": "data:,", "detail": "low"}}));
        let odd = part(
            json!({"type": "image_url", "image_url": {"url": "data:,", "detail": "original"}}),
        );
        let bound = |model: &str, p: &Map<String, Value>| image_bound(ApiKind::OpenAi, model, p);
        for model in [
            "gpt-4o-mini",
            "gpt-4o-mini-2024-07-18",
            "openai/GPT-4o-mini",
        ] {
            assert_eq!(bound(model, &high), 48_169, "{model}");
            assert_eq!(bound(model, &low), 2_833, "{model}");
        }
        for model in [
            "gpt-4o",
            "gpt-4o-2024-08-06",
            "gpt-4.1",
            "gpt-4-turbo-2024-04-09",
        ] {
            assert_eq!(bound(model, &auto), 1_445, "{model}");
            assert_eq!(bound(model, &low), 85, "{model}");
        }
        assert_eq!(bound("gpt-4.1-nano", &low), 3_779);
        // Unknown models, or names that merely start like a known one.
        for model in [
            "gpt-eval",
            "gpt-4o-audio-preview",
            "gpt-4o-minimal",
            "o3",
            "replay",
        ] {
            assert_eq!(bound(model, &high), OPENAI_WORST_HIGH, "{model}");
            assert_eq!(bound(model, &auto), OPENAI_WORST_HIGH, "{model}");
            assert_eq!(bound(model, &odd), OPENAI_WORST_HIGH, "{model}");
            assert_eq!(bound(model, &low), OPENAI_WORST_LOW, "{model}");
        }
        // The Responses shape keeps its detail on the part.
        let input_image =
            part(json!({"type": "input_image", "image_url": "data:,", "detail": "low"}));
        assert_eq!(bound("gpt-4o", &input_image), 85);
    }

    #[test]
    fn anthropic_images_are_bounded_by_the_long_edge() {
        let image = part(json!({"type": "image", "source": {"type": "base64", "data": "iVBO"}}));
        let bound = |model: &str| image_bound(ApiKind::Anthropic, model, &image);
        for model in [
            "claude-3-5-sonnet-20241022",
            "claude-sonnet-4-5",
            "claude-opus-4-20250514",
        ] {
            assert_eq!(bound(model), 3_279, "{model}");
        }
        for model in [
            "claude-opus-4-7",
            "claude-opus-4-6",
            "claude-x",
            "claude-sonnet-5",
        ] {
            assert_eq!(bound(model), 8_848, "{model}");
        }
    }

    #[test]
    fn snapshots_are_recognized_and_prefixes_are_not() {
        assert!(is_model("gpt-4o", "gpt-4o"));
        assert!(is_model("gpt-4o-2024-11-20", "gpt-4o"));
        assert!(is_model("claude-opus-4-20250514", "claude-opus-4"));
        assert!(is_model("claude-3-7-sonnet-latest", "claude-3-7-sonnet"));
        assert!(!is_model("gpt-4o-mini", "gpt-4o"));
        assert!(!is_model("gpt-4o-mini-2024-07-18", "gpt-4o"));
        assert!(!is_model("claude-opus-4-7", "claude-opus-4"));
        assert!(!is_model("claude-opus-4-1", "claude-opus-4"));
        assert!(!is_model("gpt-4o2", "gpt-4o"));
        assert!(!is_model("gpt-4o-24-08-06", "gpt-4o"));
    }

    #[test]
    fn every_image_shape_is_an_image() {
        for value in [
            json!({"type": "image_url", "image_url": {"url": "data:,"}}),
            json!({"type": "input_image", "image_url": "data:,"}),
            json!({"type": "image", "source": {}}),
            json!({"image": "iVBORw0KGgo", "resize": 512}),
            json!({"image_url": "data:,"}),
        ] {
            assert!(is_image_part(&part(value.clone())), "{value}");
        }
        for value in [
            json!({"type": "text", "text": "an image"}),
            json!({"url": "data:,", "detail": "high"}),
            json!({"type": "base64", "media_type": "image/png", "data": "x"}),
        ] {
            assert!(!is_image_part(&part(value.clone())), "{value}");
        }
    }
}
