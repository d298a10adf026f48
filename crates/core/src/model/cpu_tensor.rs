//! A CPU tensor's f32 values borrowed as a slice, for the `ragbox_kernels` calls inside candle
//! graphs (the int8 layers, nomic's SwiGLU, the fused attention).

use candle_core::{CpuStorage, Layout, Storage, Tensor};

/// The values of a contiguous f32 tensor on the CPU, as a custom op receives it.
pub(crate) fn f32_slice<'a>(storage: &'a CpuStorage, layout: &Layout) -> candle_core::Result<&'a [f32]> {
    match (storage, layout.contiguous_offsets()) {
        (CpuStorage::F32(data), Some((start, end))) => Ok(&data[start..end]),
        _ => candle_core::bail!("needs a contiguous f32 tensor on the CPU"),
    }
}

/// `f` on `tensor`'s values (made contiguous first if it is not).
pub(crate) fn with_f32_values<R>(tensor: &Tensor, f: impl FnOnce(&[f32]) -> R) -> candle_core::Result<R> {
    let tensor = tensor.contiguous()?;
    let (storage, layout) = tensor.storage_and_layout();
    match &*storage {
        Storage::Cpu(cpu) => Ok(f(f32_slice(cpu, layout)?)),
        _ => candle_core::bail!("needs a tensor on the CPU"),
    }
}
