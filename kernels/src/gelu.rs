//! GELU with the exact (erf) form, branch-free so the compiler vectorises it over a row.
//!
//! candle's `gelu_erf` calls libm's scalar `erff` per element (8% of MiniLM's time in perf). This
//! is erfc's Chebyshev fit from Numerical Recipes (fractional error below 1.2e-7) on a Cephes-style
//! `exp`: the same function to within f32 rounding, as the tests check against a series in f64.

const LOG2_E: f32 = std::f32::consts::LOG2_E;
const LN_2_HI: f32 = 0.693_359_4;
const LN_2_LO: f32 = -2.121_944_4e-4;

/// `eˣ`, with `x` clamped to [-87, 88] (where the result is a normal f32; NaN gives e⁸⁸).
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    // Selects, not `clamp` (which keeps NaN): every lane ends defined.
    let x = if x < 88.0 { x } else { 88.0 };
    let x = if x > -87.0 { x } else { -87.0 };
    let n = (x * LOG2_E).round_ties_even();
    let r = (-n).mul_add(LN_2_LO, (-n).mul_add(LN_2_HI, x));
    let p = horner(r, &[1.987_569_1e-4, 1.398_199_9e-3, 8.333_452e-3, 4.166_579_6e-2, 1.666_666_5e-1, 5.000_000_1e-1]);
    let e = (p * r).mul_add(r, r + 1.0);
    // SAFETY: |n| ≤ 127 after the clamp above. The unchecked cast keeps the loop vectorised
    // (`as i32` saturates, element by element).
    let n = unsafe { n.to_int_unchecked::<i32>() };
    e * f32::from_bits(((n + 127) as u32) << 23)
}

/// The polynomial with `coefficients` (highest power first) at `x`, by Horner's rule in fused
/// multiply-adds: Rust never contracts `a * b + c` itself, and the separate multiply and add
/// doubled the chain (the baseline, x86-64-v3, has FMA).
#[inline(always)]
fn horner(x: f32, coefficients: &[f32]) -> f32 {
    coefficients[1..].iter().fold(coefficients[0], |acc, &c| acc.mul_add(x, c))
}

/// The error function.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = horner(
        t,
        &[0.170_872_77, -0.822_152_23, 1.488_515_87, -1.135_203_98, 0.278_868_07, -0.186_288_06, 0.096_784_18, 0.374_091_96, 1.000_023_7, -1.265_512_2],
    );
    let erfc = t * exp((-z).mul_add(z, poly));
    let e = 1.0 - erfc;
    if x < 0.0 {
        -e
    } else {
        e
    }
}

/// `x · Φ(x)`, the GELU of BERT (`hidden_act = "gelu"`).
#[inline(always)]
pub fn gelu_erf(x: f32) -> f32 {
    let half = 0.5 * x;
    half.mul_add(erf(x * std::f32::consts::FRAC_1_SQRT_2), half)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// erf by its Maclaurin series in f64 (|x| < 5), 1 beyond.
    fn erf_f64(x: f64) -> f64 {
        if x.abs() >= 5.0 {
            return x.signum();
        }
        let (mut sum, mut term, mut n) = (0.0f64, x, 0.0f64);
        while term.abs() > 1e-17 * sum.abs().max(1e-300) || n < 3.0 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    }

    #[test]
    fn erf_matches_the_series_to_f32_precision() {
        let mut worst = 0.0f64;
        for i in -8000..=8000 {
            let x = i as f32 / 1000.0;
            let err = (f64::from(erf(x)) - erf_f64(f64::from(x))).abs();
            worst = worst.max(err);
        }
        assert!(worst < 4e-7, "worst absolute error {worst}");
        assert_eq!(erf(0.0), 0.0);
        assert!(erf(f32::MAX) == 1.0 && erf(-1e30) == -1.0);
    }

    #[test]
    fn gelu_matches_its_definition() {
        for i in -2000..=2000 {
            let x = i as f32 / 100.0;
            let want = 0.5 * f64::from(x) * (1.0 + erf_f64(f64::from(x) / 2f64.sqrt()));
            let got = f64::from(gelu_erf(x));
            assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "gelu({x}) = {got}, want {want}");
        }
    }

    #[test]
    fn exp_is_accurate_over_its_range() {
        for i in -870..=880 {
            let x = i as f32 / 10.0;
            let want = f64::from(x).exp();
            let rel = ((f64::from(exp(x)) - want) / want).abs();
            assert!(rel < 3e-7, "exp({x}): relative error {rel}");
        }
    }
}
