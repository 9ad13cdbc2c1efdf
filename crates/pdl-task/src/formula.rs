//! The reward formula ([`RewardFormula`]): parsed from the row's text, evaluated
//! exactly.
//!
//! A formula is a sum of `coefficient*variable` terms over the three variables of
//! the reward. The `*` may be missing (`0.80hidden_pass_fraction`) or replaced by
//! spaces, as the dataset card renders it. Coefficients are decimal numbers and are
//! kept as exact fractions, so that `0.80 + 0.15 + 0.05` is exactly one and the gold
//! patch scores exactly `1.0`, the empty patch exactly `0.2`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A variable of the reward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardVariable {
    /// Passed FAIL_TO_PASS / len(FAIL_TO_PASS).
    HiddenPassFraction,
    /// Passed PASS_TO_PASS / len(PASS_TO_PASS), 1.0 when empty.
    PublicRegression,
    /// 1 when every `.py` file compiles and every test file collected, else 0.
    BuildHealth,
}

impl RewardVariable {
    /// Every variable, in the order records list them.
    pub const ALL: [RewardVariable; 3] = [
        RewardVariable::HiddenPassFraction,
        RewardVariable::PublicRegression,
        RewardVariable::BuildHealth,
    ];

    /// The variable's name in formulas and records.
    pub fn name(self) -> &'static str {
        match self {
            RewardVariable::HiddenPassFraction => "hidden_pass_fraction",
            RewardVariable::PublicRegression => "public_regression",
            RewardVariable::BuildHealth => "build_health",
        }
    }

    fn from_name(name: &str) -> Option<Self> {
        RewardVariable::ALL.into_iter().find(|v| v.name() == name)
    }
}

/// An exact non-negative rational number, `num / den` in lowest terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fraction {
    /// Numerator.
    pub num: i128,
    /// Denominator, always positive.
    pub den: i128,
}

fn gcd(mut a: i128, mut b: i128) -> i128 {
    a = a.abs();
    b = b.abs();
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

impl Fraction {
    /// `num / den` reduced. Panics on a zero denominator (a programming error).
    pub fn new(num: i128, den: i128) -> Self {
        assert!(den != 0, "fraction with zero denominator");
        let sign = if den < 0 { -1 } else { 1 };
        let g = gcd(num, den);
        Fraction {
            num: sign * num / g,
            den: sign * den / g,
        }
    }

    /// Zero.
    pub const ZERO: Fraction = Fraction { num: 0, den: 1 };
    /// One.
    pub const ONE: Fraction = Fraction { num: 1, den: 1 };

    /// The nearest `f64`, correctly rounded when both parts fit in 53 bits.
    pub fn to_f64(self) -> f64 {
        self.num as f64 / self.den as f64
    }
}

impl Fraction {
    /// The exact sum, or `None` when it does not fit in `i128` (a formula with
    /// long coefficients over large test counts can get there).
    pub fn checked_add(self, other: Fraction) -> Option<Fraction> {
        let g = gcd(self.den, other.den);
        let den = (self.den / g).checked_mul(other.den)?;
        let a = self.num.checked_mul(den / self.den)?;
        let b = other.num.checked_mul(den / other.den)?;
        Some(Fraction::new(a.checked_add(b)?, den))
    }

    /// The exact product, or `None` when it does not fit in `i128`.
    pub fn checked_mul(self, other: Fraction) -> Option<Fraction> {
        let a = Fraction::new(self.num, other.den);
        let b = Fraction::new(other.num, self.den);
        Some(Fraction::new(
            a.num.checked_mul(b.num)?,
            a.den.checked_mul(b.den)?,
        ))
    }
}

/// One `coefficient*variable` term.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormulaTerm {
    /// The coefficient, exact.
    pub coefficient: Fraction,
    /// The coefficient as written (`0.80`).
    pub coefficient_text: String,
    /// The variable it multiplies.
    pub variable: RewardVariable,
}

/// A parsed reward formula.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewardFormula {
    /// The terms, in the order written.
    pub terms: Vec<FormulaTerm>,
}

/// Why a reward formula could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reward formula `{formula}`: {reason}")]
pub struct FormulaError {
    /// The formula text.
    pub formula: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The values of the three variables for one graded submission, as exact fractions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RewardInputs {
    /// Hidden tests passed over hidden test count.
    pub hidden_pass_fraction: Fraction,
    /// Public tests passed over public test count (one when there are none).
    pub public_regression: Fraction,
    /// Zero or one.
    pub build_health: Fraction,
}

impl RewardInputs {
    /// Inputs from test counts.
    pub fn from_counts(
        hidden_passed: usize,
        hidden_total: usize,
        public_passed: usize,
        public_total: usize,
        build_healthy: bool,
    ) -> Self {
        let ratio = |passed: usize, total: usize| {
            if total == 0 {
                Fraction::ONE
            } else {
                Fraction::new(passed as i128, total as i128)
            }
        };
        RewardInputs {
            hidden_pass_fraction: ratio(hidden_passed, hidden_total),
            public_regression: ratio(public_passed, public_total),
            build_health: if build_healthy {
                Fraction::ONE
            } else {
                Fraction::ZERO
            },
        }
    }

    /// The value of one variable.
    pub fn get(&self, variable: RewardVariable) -> Fraction {
        match variable {
            RewardVariable::HiddenPassFraction => self.hidden_pass_fraction,
            RewardVariable::PublicRegression => self.public_regression,
            RewardVariable::BuildHealth => self.build_health,
        }
    }
}

fn parse_decimal(text: &str) -> Option<Fraction> {
    let (int_part, frac_part) = match text.split_once('.') {
        Some((i, f)) => (i, f),
        None => (text, ""),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    if !int_part.chars().all(|c| c.is_ascii_digit())
        || !frac_part.chars().all(|c| c.is_ascii_digit())
        || int_part.len() + frac_part.len() > 30
    {
        return None;
    }
    let digits = format!("{int_part}{frac_part}");
    let num: i128 = digits.parse().ok()?;
    let den = 10i128.checked_pow(frac_part.len() as u32)?;
    Some(Fraction::new(num, den))
}

impl RewardFormula {
    /// Parses a formula such as `0.80*hidden_pass_fraction + 0.15 public_regression`.
    pub fn parse(text: &str) -> Result<Self, FormulaError> {
        let error = |reason: String| FormulaError {
            formula: text.to_string(),
            reason,
        };
        if text.trim().is_empty() {
            return Err(error("the formula is empty".into()));
        }
        let mut terms = Vec::new();
        let mut seen = Vec::new();
        for (index, raw) in text.split('+').enumerate() {
            let term = raw.trim();
            if term.is_empty() {
                return Err(error(format!("term {} is empty", index + 1)));
            }
            let number_end = term
                .find(|c: char| !(c.is_ascii_digit() || c == '.'))
                .unwrap_or(term.len());
            let (number, rest) = term.split_at(number_end);
            if number.is_empty() {
                return Err(error(format!(
                    "term `{term}` has no coefficient (expected `coefficient*variable`)"
                )));
            }
            let coefficient = parse_decimal(number)
                .ok_or_else(|| error(format!("`{number}` is not a decimal coefficient")))?;
            let rest = rest.trim_start();
            let rest = rest.strip_prefix('*').unwrap_or(rest).trim();
            if rest.is_empty() {
                return Err(error(format!("term `{term}` names no variable")));
            }
            let variable = RewardVariable::from_name(rest).ok_or_else(|| {
                error(format!(
                    "unknown variable `{rest}` (known: hidden_pass_fraction, public_regression, build_health)"
                ))
            })?;
            if seen.contains(&variable) {
                return Err(error(format!("variable `{rest}` appears twice")));
            }
            seen.push(variable);
            terms.push(FormulaTerm {
                coefficient,
                coefficient_text: number.to_string(),
                variable,
            });
        }
        Ok(RewardFormula { terms })
    }

    /// The sum of the coefficients, exact (`None` if it does not fit in
    /// `i128`, which parsed coefficients of at most 30 digits never reach:
    /// their denominators are powers of ten).
    pub fn coefficient_sum(&self) -> Option<Fraction> {
        self.terms
            .iter()
            .try_fold(Fraction::ZERO, |acc, t| acc.checked_add(t.coefficient))
    }

    /// The reward as an exact fraction, or `None` when the exact value does
    /// not fit in `i128`.
    pub fn evaluate_exact(&self, inputs: &RewardInputs) -> Option<Fraction> {
        self.terms.iter().try_fold(Fraction::ZERO, |acc, t| {
            acc.checked_add(t.coefficient.checked_mul(inputs.get(t.variable))?)
        })
    }

    /// The reward as the nearest `f64`: from the exact fraction, or, when that
    /// does not fit, summed in floating point (never a wrapped or panicking
    /// result).
    pub fn evaluate(&self, inputs: &RewardInputs) -> f64 {
        match self.evaluate_exact(inputs) {
            Some(exact) => exact.to_f64(),
            None => self
                .terms
                .iter()
                .map(|t| t.coefficient.to_f64() * inputs.get(t.variable).to_f64())
                .sum(),
        }
    }
}

impl fmt::Display for RewardFormula {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, term) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(" + ")?;
            }
            write!(f, "{}*{}", term.coefficient_text, term.variable.name())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STANDARD: &str = "0.80*hidden_pass_fraction + 0.15*public_regression + 0.05*build_health";

    #[test]
    fn parses_the_standard_formula() {
        let f = RewardFormula::parse(STANDARD).unwrap();
        assert_eq!(f.terms.len(), 3);
        assert_eq!(f.terms[0].coefficient, Fraction::new(4, 5));
        assert_eq!(f.coefficient_sum(), Some(Fraction::ONE));
        assert_eq!(f.to_string(), STANDARD);
    }

    #[test]
    fn accepts_the_missing_star_form_of_the_card() {
        let f = RewardFormula::parse(
            "0.80hidden_pass_fraction + 0.15public_regression + 0.05*build_health",
        )
        .unwrap();
        assert_eq!(f, RewardFormula::parse(STANDARD).unwrap());
        let spaced = RewardFormula::parse(
            "0.80 hidden_pass_fraction+0.15 public_regression+0.05 build_health",
        )
        .unwrap();
        assert_eq!(spaced.coefficient_sum(), Some(Fraction::ONE));
    }

    #[test]
    fn rejects_unknown_variables_and_malformed_terms() {
        for bad in [
            "0.8*hidden_pass_fraction + 0.2*vibes",
            "",
            "0.8*hidden_pass_fraction +",
            "hidden_pass_fraction",
            "0.8*",
            "0.8.1*build_health",
            "0.5*build_health + 0.5*build_health",
        ] {
            let err = RewardFormula::parse(bad).unwrap_err();
            assert_eq!(err.formula, bad);
        }
        let err = RewardFormula::parse("0.8*hidden_pass_fraction + 0.2*vibes").unwrap_err();
        assert!(err.reason.contains("unknown variable `vibes`"), "{err}");
    }

    #[test]
    fn gold_and_do_nothing_are_exact() {
        let f = RewardFormula::parse(STANDARD).unwrap();
        let gold = RewardInputs::from_counts(3, 3, 6, 6, true);
        assert_eq!(f.evaluate(&gold), 1.0);
        let noop = RewardInputs::from_counts(0, 3, 6, 6, true);
        assert_eq!(f.evaluate(&noop), 0.2);
        // Naive floating point drifts on partial rewards; the exact sum does not.
        let two_fifths = RewardInputs::from_counts(2, 5, 6, 6, true);
        assert_eq!(f.evaluate(&two_fifths), 0.52);
        assert_ne!(0.8f64 * (2.0 / 5.0) + 0.15 + 0.05, 0.52);
    }

    #[test]
    fn partial_rewards_round_once() {
        let f = RewardFormula::parse(STANDARD).unwrap();
        let rung = RewardInputs::from_counts(1, 3, 6, 6, true);
        assert_eq!(f.evaluate_exact(&rung), Some(Fraction::new(7, 15)));
        assert_eq!(f.evaluate(&rung), 7.0 / 15.0);
        let broken = RewardInputs::from_counts(0, 3, 3, 6, false);
        assert_eq!(f.evaluate(&broken), 0.075);
        let no_public = RewardInputs::from_counts(1, 1, 0, 0, true);
        assert_eq!(f.evaluate(&no_public), 1.0);
    }

    #[test]
    fn long_coefficients_over_large_counts_do_not_overflow() {
        // Coefficients of 29 decimals over prime test counts near 100,000:
        // the common denominator passes i128, so the reward comes from the
        // floating-point sum instead of a wrapped (or, in debug, panicking) one.
        let f = RewardFormula::parse(
            "0.12345678901234567890123456789*hidden_pass_fraction + \
             0.87654321098765432109876543211*public_regression",
        )
        .unwrap();
        assert_eq!(f.coefficient_sum(), Some(Fraction::ONE));
        let inputs = RewardInputs::from_counts(99990, 99991, 99988, 99989, true);
        assert_eq!(f.evaluate_exact(&inputs), None);
        let reward = f.evaluate(&inputs);
        let expected = 0.123_456_789_012_345_68 * (99990.0 / 99991.0)
            + 0.876_543_210_987_654_3 * (99988.0 / 99989.0);
        assert!((reward - expected).abs() < 1e-12, "{reward} vs {expected}");
        assert!((0.0..=1.0).contains(&reward));
    }
}
