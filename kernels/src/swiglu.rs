//! SwiGLU's gate, `value · silu(gate)`, vectorised: nomic-bert's feed-forward between its
//! up-projection (value and gate side by side, one matmul) and its down-projection.
//!
//! candle's `silu` calls libm's scalar `expf` per element and the multiply is a second pass into
//! a second fresh buffer; here both are one pass on the crate's polynomial `exp`.

use rayon::prelude::*;

use crate::gelu::exp;

/// Rows handled by one parallel task.
const ROWS_PER_TASK: usize = 16;

/// `x`: rows of `2 · inner` values, `[value | gate]`; returns rows of `inner`,
/// `value · gate / (1 + e^(−gate))`.
pub fn swiglu(x: &[f32], inner: usize) -> Vec<f32> {
    assert!(inner > 0 && x.len() % (2 * inner) == 0, "input is not rows of 2 × {inner}");
    let rows = x.len() / (2 * inner);
    let mut y = vec![0f32; rows * inner];
    y.par_chunks_mut(inner * ROWS_PER_TASK).zip(x.par_chunks(2 * inner * ROWS_PER_TASK)).for_each(|(y, x)| {
        for (y, x) in y.chunks_exact_mut(inner).zip(x.chunks_exact(2 * inner)) {
            let (value, gate) = x.split_at(inner);
            for ((y, &v), &g) in y.iter_mut().zip(value).zip(gate) {
                *y = v * g / (1.0 + exp(-g));
            }
        }
    });
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_value_times_silu_of_gate() {
        let inner = 37;
        let x: Vec<f32> = (0..3 * 2 * inner).map(|i| (i as f32 * 0.37).sin() * 12.0).collect();
        let y = swiglu(&x, inner);
        assert_eq!(y.len(), 3 * inner);
        for r in 0..3 {
            for j in 0..inner {
                let (v, g) = (f64::from(x[r * 2 * inner + j]), f64::from(x[r * 2 * inner + inner + j]));
                let want = v * g / (1.0 + (-g).exp());
                let got = f64::from(y[r * inner + j]);
                assert!((got - want).abs() <= 1e-6 * want.abs().max(1.0), "row {r} col {j}: {got} vs {want}");
            }
        }
        // Far out in the tails: silu(g) → g for large g, → 0 (not NaN) for very negative g.
        let tails = swiglu(&[2.0, 3.0, 100.0, -1000.0], 2);
        assert_eq!(tails[0], 200.0);
        assert!(tails[1].abs() < 1e-30, "{}", tails[1]);
    }
}
