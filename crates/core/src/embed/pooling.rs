//! Pooling token states into one vector, and L2 normalisation.

use candle_core::{DType, Tensor, D};

use crate::model::Pooling;

/// Pools `(batch, seq, hidden)` states under a `(batch, seq)` 0/1 mask into `(batch, hidden)`.
pub fn pool(states: &Tensor, mask: &Tensor, pooling: Pooling) -> candle_core::Result<Tensor> {
    match pooling {
        Pooling::Cls => states.narrow(1, 0, 1)?.squeeze(1),
        Pooling::Mean => {
            let mask = mask.to_dtype(states.dtype())?.unsqueeze(2)?;
            let summed = states.broadcast_mul(&mask)?.sum(1)?;
            let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?;
            summed.broadcast_div(&counts)
        }
    }
}

/// Scales each row to unit L2 norm (rows of zeros stay zero).
pub fn l2_normalize(x: &Tensor) -> candle_core::Result<Tensor> {
    let norm = x.to_dtype(DType::F32)?.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
    x.to_dtype(DType::F32)?.broadcast_div(&norm)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn mean_pooling_ignores_padding() {
        let states = Tensor::new(&[[[1f32, 2.], [3., 4.], [100., 100.]]], &Device::Cpu).unwrap();
        let mask = Tensor::new(&[[1u32, 1, 0]], &Device::Cpu).unwrap();
        let pooled = pool(&states, &mask, Pooling::Mean).unwrap();
        assert_eq!(pooled.to_vec2::<f32>().unwrap(), vec![vec![2., 3.]]);
        let cls = pool(&states, &mask, Pooling::Cls).unwrap();
        assert_eq!(cls.to_vec2::<f32>().unwrap(), vec![vec![1., 2.]]);
    }

    #[test]
    fn normalised_rows_have_unit_length() {
        let x = Tensor::new(&[[3f32, 4.], [0., 0.]], &Device::Cpu).unwrap();
        let n = l2_normalize(&x).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(n, vec![vec![0.6, 0.8], vec![0., 0.]]);
    }
}
