//! The statistics behind every reward column: the mean and a 95% confidence
//! interval of the mean.
//!
//! The interval is a **percentile bootstrap**: [`BOOTSTRAP_RESAMPLES`] resamples
//! (with replacement, of the same size as the data) are drawn with a
//! [`SplitMix64`] generator seeded with [`BOOTSTRAP_SEED`]; the interval runs from
//! the 2.5th to the 97.5th percentile of the resampled means. The data are sorted
//! before resampling, so the interval depends only on the multiset of values, never
//! on the order of the records, and the same data always give the same interval.
//! With one value (or identical values) the interval is the point itself; with no
//! value there is no interval. A percentile interval never leaves the range of the
//! data, so a reward interval stays within the rewards observed.

use serde::Serialize;

/// How many bootstrap resamples each interval uses.
pub const BOOTSTRAP_RESAMPLES: usize = 2000;

/// The fixed seed of the bootstrap generator.
pub const BOOTSTRAP_SEED: u64 = 0x5EED_5EED_5EED_5EED;

/// The confidence level of every interval in the reports.
pub const CONFIDENCE: f64 = 0.95;

/// A closed interval `[lo, hi]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// The lower bound.
    pub lo: f64,
    /// The upper bound.
    pub hi: f64,
}

impl Interval {
    /// True when `x` lies within the interval (bounds included).
    pub fn contains(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }
}

/// The SplitMix64 generator: tiny, fast, deterministic, good enough for
/// resampling indices.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform index below `n` (`n > 0`), by multiply-and-shift.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

/// The arithmetic mean, or `None` for no values. Identical values give that
/// value exactly.
pub fn mean(values: &[f64]) -> Option<f64> {
    let first = *values.first()?;
    if values.iter().all(|v| *v == first) {
        return Some(first);
    }
    Some(values.iter().sum::<f64>() / values.len() as f64)
}

/// The 95% percentile-bootstrap interval of the mean of `values` with the report's
/// fixed resample count and seed (see the module documentation).
pub fn mean_ci(values: &[f64]) -> Option<Interval> {
    bootstrap_mean_ci(values, CONFIDENCE, BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED)
}

/// The percentile-bootstrap interval of the mean at `level` (for example 0.95),
/// with `resamples` resamples drawn from a [`SplitMix64`] seeded with `seed`.
/// `None` for no values; the point itself for one value or identical values.
pub fn bootstrap_mean_ci(
    values: &[f64],
    level: f64,
    resamples: usize,
    seed: u64,
) -> Option<Interval> {
    let point = mean(values)?;
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.first() == sorted.last() || resamples == 0 {
        return Some(Interval {
            lo: point,
            hi: point,
        });
    }
    let n = sorted.len();
    let mut rng = SplitMix64::new(seed);
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| (0..n).map(|_| sorted[rng.below(n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let alpha = (1.0 - level.clamp(0.0, 1.0)) / 2.0;
    let lo_index = ((alpha * resamples as f64).floor() as usize).min(resamples - 1);
    let hi_index = (((1.0 - alpha) * resamples as f64).ceil() as usize)
        .saturating_sub(1)
        .clamp(lo_index, resamples - 1);
    Some(Interval {
        lo: means[lo_index],
        hi: means[hi_index],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // The reference implementation's first outputs for seed 1234567.
        let mut rng = SplitMix64::new(1234567);
        assert_eq!(rng.next_u64(), 6457827717110365317);
        assert_eq!(rng.next_u64(), 3203168211198807973);
        assert_eq!(rng.next_u64(), 9817491932198370423);
    }

    #[test]
    fn indices_stay_below_the_bound_and_cover_it() {
        let mut rng = SplitMix64::new(7);
        let mut seen = [0usize; 5];
        for _ in 0..10_000 {
            seen[rng.below(5)] += 1;
        }
        assert!(seen.iter().all(|&c| c > 1500 && c < 2500), "{seen:?}");
    }

    #[test]
    fn no_values_have_no_mean_and_no_interval() {
        assert_eq!(mean(&[]), None);
        assert_eq!(mean_ci(&[]), None);
    }

    #[test]
    fn one_value_gives_the_point() {
        assert_eq!(mean(&[0.6]), Some(0.6));
        assert_eq!(mean_ci(&[0.6]), Some(Interval { lo: 0.6, hi: 0.6 }));
    }

    #[test]
    fn identical_values_give_the_point() {
        assert_eq!(
            mean_ci(&[0.2, 0.2, 0.2]),
            Some(Interval { lo: 0.2, hi: 0.2 })
        );
    }

    #[test]
    fn two_values_give_an_interval_within_their_range() {
        let ci = mean_ci(&[0.2, 1.0]).unwrap();
        // Resampled means of two values are 0.2, 0.6 or 1.0 (with probability
        // 1/4, 1/2, 1/4): the 2.5th and 97.5th percentiles are the extremes.
        assert_eq!(ci, Interval { lo: 0.2, hi: 1.0 });
    }

    #[test]
    fn the_interval_is_deterministic_and_order_free() {
        let a = mean_ci(&[0.2, 1.0, 0.6, 0.6, 0.2]).unwrap();
        let b = mean_ci(&[0.6, 0.2, 0.2, 1.0, 0.6]).unwrap();
        assert_eq!(a, b);
        assert!(a.contains(0.52), "{a:?}");
        assert!(a.lo >= 0.2 && a.hi <= 1.0, "{a:?}");
    }

    #[test]
    fn a_large_sample_agrees_with_the_normal_interval() {
        // 400 values, half 0 and half 1: mean 0.5, standard error 0.025, so the
        // normal interval is 0.5 ± 0.049.
        let values: Vec<f64> = (0..400).map(|i| f64::from(i % 2)).collect();
        let ci = mean_ci(&values).unwrap();
        assert!((ci.lo - 0.451).abs() < 0.012, "{ci:?}");
        assert!((ci.hi - 0.549).abs() < 0.012, "{ci:?}");
    }

    #[test]
    fn a_wider_level_gives_a_wider_interval() {
        let values = [0.1, 0.4, 0.35, 0.8, 0.9, 0.2, 0.65];
        let narrow = bootstrap_mean_ci(&values, 0.5, 2000, 1).unwrap();
        let wide = bootstrap_mean_ci(&values, 0.99, 2000, 1).unwrap();
        assert!(wide.lo <= narrow.lo && narrow.hi <= wide.hi);
        assert!(wide.hi - wide.lo > narrow.hi - narrow.lo);
    }
}
