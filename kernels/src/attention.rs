//! Multi-head attention for the encoders in one pass per block of query rows: scores, the masked
//! softmax and the weighted sum of the values, written straight into the context's
//! `(batch, seq, heads × head_dim)` layout.
//!
//! candle's path for an int8 MiniLM batch (8 × 256 tokens, 32-wide heads) spent 24% of the time
//! in gemm's f32 micro-kernel at about a tenth of its peak (a small product per head and batch
//! item, each packed anew) and another 11% in the softmax around it; the scores of all heads
//! were materialised for the whole batch. Here each parallel task takes one head of one input
//! and a block of its query rows ([`TASK_SCORES`]): the head's keys transposed once beforehand, a
//! register tile of 12 query rows × 32 keys for the scores (24 FMA accumulators), the softmax on
//! each row, and a tile of rows × the head's width for the values. The scores never exceed
//! a block's rows × seq floats per thread, so an 8,192-token input needs no stepping.
//!
//! AVX-512 F where the CPU has it, AVX2 with FMA tiles of half the width on other x86 CPUs
//! (checked at run time), plain loops elsewhere: all sum in the same order per element, so they
//! agree to rounding (the tests compare them and a reference). The AVX2 tiles matter on the CPUs
//! most laptops and many servers have (no AVX-512): there the plain loops, which load and store
//! a row of scores for every query element, were 19% of an L-12 rerank on a Zen 1 EPYC.

use rayon::prelude::*;

use crate::softmax::softmax_row;

/// Most scores a task holds (256 KiB: within L2), and so most query rows it takes...
const TASK_SCORES: usize = 1 << 16;
/// ... but never fewer rows than this. Rows per task are a multiple of every tile height below
/// (12, 8, 6). A short input's head is one task; an 8,192-token one's
/// takes 48 rows at a time (1.5 MiB of scores).
const MIN_QUERY_BLOCK: usize = 48;
/// Query rows of the scores tile.
const SCORE_ROWS: usize = 12;
/// Keys of the scores tile (two 16-lane registers); the transposed keys are padded to it.
const SCORE_KEYS: usize = 32;

/// `q`, `k`, `v`: `(batch, heads, seq, head_dim)` row-major, the query already scaled by
/// 1/√head_dim; `mask`: additive `(batch, seq)` (0 for a key attended, a large negative number
/// for padding), if any. Writes every element of `out`, `(batch, seq, heads × head_dim)`.
#[allow(clippy::too_many_arguments)]
pub fn attention(q: &[f32], k: &[f32], v: &[f32], batch: usize, heads: usize, seq: usize, head_dim: usize, mask: Option<&[f32]>, out: &mut [f32]) {
    let len = batch * heads * seq * head_dim;
    assert!(q.len() == len && k.len() == len && v.len() == len, "q, k and v are not {batch} × {heads} × {seq} × {head_dim}");
    assert_eq!(out.len(), len, "the output is not {batch} × {seq} × {}", heads * head_dim);
    if let Some(mask) = mask {
        assert_eq!(mask.len(), batch * seq, "the mask is not {batch} × {seq}");
    }
    if len == 0 {
        return;
    }
    let fast = Fast::for_head_dim(head_dim);
    let keys_t = transposed_keys(k, batch * heads, seq, head_dim);
    let query_block = query_block(seq);
    let blocks = seq.div_ceil(query_block);
    let out = Shared(out.as_mut_ptr());
    (0..batch * heads * blocks).into_par_iter().for_each(|task| {
        let (item, block) = (task / blocks, task % blocks);
        let (b, h) = (item / heads, item % heads);
        let head = item * seq * head_dim..(item + 1) * seq * head_dim;
        let first = block * query_block;
        let rows = query_block.min(seq - first);
        let head_t = keys_t.len() / (batch * heads);
        let job = Job {
            q: &q[head.start + first * head_dim..head.start + (first + rows) * head_dim],
            keys_t: &keys_t[item * head_t..(item + 1) * head_t],
            v: &v[head],
            mask: mask.map(|m| &m[b * seq..(b + 1) * seq]),
            seq,
            head_dim,
            rows,
        };
        // SAFETY: this task writes rows `first..first + rows` of input `b`, columns of head `h`,
        // and no other task writes them; all are inside `out` (checked above).
        let out = unsafe { out.at((b * seq + first) * heads * head_dim + h * head_dim) };
        SCRATCH.with_borrow_mut(|scratch| job.run(scratch, fast, out, heads * head_dim));
    });
}

/// Each head's keys (`heads × seq × head_dim` in `k`) transposed to `(head_dim, seq padded to
/// SCORE_KEYS)`, zeros in the padding: once per head, in parallel, 16 keys at a time so each
/// write fills a cache line. (Per task and key by key it was 55% of an 8,192-token input's time:
/// every store a different page.)
fn transposed_keys(k: &[f32], heads: usize, seq: usize, head_dim: usize) -> Vec<f32> {
    let keys = seq.next_multiple_of(SCORE_KEYS);
    let mut t = vec![0f32; heads * head_dim * keys];
    t.par_chunks_mut(head_dim * keys).zip(k.par_chunks(seq * head_dim)).for_each(|(t, k)| {
        for first in (0..seq).step_by(16) {
            let last = (first + 16).min(seq);
            for c in 0..head_dim {
                for (j, slot) in t[c * keys + first..c * keys + last].iter_mut().enumerate() {
                    *slot = k[(first + j) * head_dim + c];
                }
            }
        }
    });
    t
}

/// Query rows per task for `seq` keys: see [`TASK_SCORES`].
fn query_block(seq: usize) -> usize {
    let rows = (TASK_SCORES / seq.next_multiple_of(SCORE_KEYS)).max(MIN_QUERY_BLOCK);
    rows - rows % 24
}

/// The output's first element, shared by the tasks (each writes its own rows and columns).
#[derive(Clone, Copy)]
struct Shared(*mut f32);
// SAFETY: the tasks write disjoint parts of the output (`attention`).
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    /// # Safety
    /// `offset` is inside the output.
    unsafe fn at(&self, offset: usize) -> *mut f32 {
        self.0.add(offset)
    }
}

thread_local! {
    /// Each thread's buffers, kept across tasks and calls: fresh ones cost page clearing (5.7% of
    /// an int8 MiniLM embedding in perf when they were made per task).
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// A task's buffers.
#[derive(Default)]
struct Scratch {
    /// The query rows, padded with zero rows to a whole number of score tiles.
    queries: Vec<f32>,
    /// `(query rows padded, keys padded)`: scores, then probabilities.
    scores: Vec<f32>,
}

/// Which kernels run: AVX-512 or AVX2 tiles (with the head's width in registers of the value
/// tile), or plain loops.
#[derive(Clone, Copy)]
enum Fast {
    Avx512 { value_lanes: usize },
    Avx2 { value_lanes: usize },
    Plain,
}

impl Fast {
    fn for_head_dim(head_dim: usize) -> Fast {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx512f") && head_dim.is_multiple_of(16) && (1..=4).contains(&(head_dim / 16)) {
            return Fast::Avx512 { value_lanes: head_dim / 16 };
        }
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && head_dim.is_multiple_of(8) && (1..=8).contains(&(head_dim / 8)) {
            return Fast::Avx2 { value_lanes: head_dim / 8 };
        }
        let _ = head_dim;
        Fast::Plain
    }
}

/// One head of one input, `rows` query rows.
struct Job<'a> {
    q: &'a [f32],
    /// The head's keys transposed ([`transposed_keys`]).
    keys_t: &'a [f32],
    v: &'a [f32],
    mask: Option<&'a [f32]>,
    seq: usize,
    head_dim: usize,
    rows: usize,
}

impl Job<'_> {
    fn run(&self, scratch: &mut Scratch, fast: Fast, out: *mut f32, out_stride: usize) {
        let (d, seq) = (self.head_dim, self.seq);
        let keys = seq.next_multiple_of(SCORE_KEYS);
        let rows = self.rows.next_multiple_of(SCORE_ROWS);
        debug_assert_eq!(self.keys_t.len(), d * keys);
        scratch.queries.clear();
        scratch.queries.extend_from_slice(self.q);
        scratch.queries.resize(rows * d, 0.0);
        scratch.scores.resize(rows * keys, 0.0);
        match fast {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX-512 F (`Fast::for_head_dim`); the buffers have the sizes
            // the tiles read and write (set above); `out` holds `self.rows` rows of `d` floats,
            // `out_stride` apart (the caller).
            Fast::Avx512 { value_lanes } => unsafe {
                for r in (0..rows).step_by(SCORE_ROWS) {
                    for j in (0..keys).step_by(SCORE_KEYS) {
                        avx512::score_tile(&scratch.queries[r * d..], d, &self.keys_t[j..], keys, scratch.scores[r * keys + j..].as_mut_ptr());
                    }
                }
                self.softmax(&mut scratch.scores, keys);
                let p = &scratch.scores;
                match value_lanes {
                    1 => avx512::value_rows::<12, 1>(p, keys, self.v, seq, self.rows, out, out_stride),
                    2 => avx512::value_rows::<12, 2>(p, keys, self.v, seq, self.rows, out, out_stride),
                    3 => avx512::value_rows::<8, 3>(p, keys, self.v, seq, self.rows, out, out_stride),
                    _ => avx512::value_rows::<6, 4>(p, keys, self.v, seq, self.rows, out, out_stride),
                }
            },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: the CPU has AVX2 and FMA (`Fast::for_head_dim`); the score tiles (6 × 16)
            // divide the padded scores (12 × 32) and the value tiles' heights divide 12; the
            // rest as for AVX-512.
            Fast::Avx2 { value_lanes } => unsafe {
                for r in (0..rows).step_by(avx2::SCORE_ROWS) {
                    for j in (0..keys).step_by(avx2::SCORE_KEYS) {
                        avx2::score_tile(&scratch.queries[r * d..], d, &self.keys_t[j..], keys, scratch.scores[r * keys + j..].as_mut_ptr());
                    }
                }
                self.softmax(&mut scratch.scores, keys);
                let p = &scratch.scores;
                match value_lanes {
                    // R rows × L registers: R·L sums, R broadcasts and one value row in the
                    // 16 registers.
                    1 => avx2::value_rows::<6, 1>(p, keys, self.v, seq, self.rows, out, out_stride),
                    2 => avx2::value_rows::<4, 2>(p, keys, self.v, seq, self.rows, out, out_stride),
                    3 => avx2::value_rows::<3, 3>(p, keys, self.v, seq, self.rows, out, out_stride),
                    4 => avx2::value_rows::<3, 4>(p, keys, self.v, seq, self.rows, out, out_stride),
                    5 => avx2::value_rows::<2, 5>(p, keys, self.v, seq, self.rows, out, out_stride),
                    6 => avx2::value_rows::<2, 6>(p, keys, self.v, seq, self.rows, out, out_stride),
                    7 => avx2::value_rows::<1, 7>(p, keys, self.v, seq, self.rows, out, out_stride),
                    _ => avx2::value_rows::<1, 8>(p, keys, self.v, seq, self.rows, out, out_stride),
                }
            },
            _ => {
                for (r, query) in scratch.queries.chunks_exact(d).take(self.rows).enumerate() {
                    let scores = &mut scratch.scores[r * keys..(r + 1) * keys];
                    scores.fill(0.0);
                    for (c, &x) in query.iter().enumerate() {
                        for (s, &kt) in scores.iter_mut().zip(&self.keys_t[c * keys..(c + 1) * keys]) {
                            *s += x * kt;
                        }
                    }
                }
                self.softmax(&mut scratch.scores, keys);
                let mut context = vec![0f32; d];
                for r in 0..self.rows {
                    context.fill(0.0);
                    for (&p, value) in scratch.scores[r * keys..r * keys + seq].iter().zip(self.v.chunks_exact(d)) {
                        for (o, &x) in context.iter_mut().zip(value) {
                            *o += p * x;
                        }
                    }
                    // SAFETY: as above: row `r` of the task's output rows.
                    unsafe { std::ptr::copy_nonoverlapping(context.as_ptr(), out.add(r * out_stride), d) };
                }
            }
        }
    }

    /// Each real query row's scores over the real keys → probabilities.
    fn softmax(&self, scores: &mut [f32], keys: usize) {
        for row in scores.chunks_exact_mut(keys).take(self.rows) {
            softmax_row(&mut row[..self.seq], self.mask);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{SCORE_KEYS, SCORE_ROWS};

    /// Scores of [`SCORE_ROWS`] query rows (`q`, rows `d` apart) × [`SCORE_KEYS`] keys (`keys_t`,
    /// the transposed keys from the tile's first key, rows `stride` apart) into `s` (rows
    /// `stride` apart).
    ///
    /// # Safety
    /// AVX-512 F; `q` holds the rows, `keys_t` `d` rows of `SCORE_KEYS` from its start, `s`
    /// `SCORE_ROWS` rows of `SCORE_KEYS` writable floats.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn score_tile(q: &[f32], d: usize, keys_t: &[f32], stride: usize, s: *mut f32) {
        debug_assert!(q.len() >= SCORE_ROWS * d && keys_t.len() >= (d - 1) * stride + SCORE_KEYS);
        let (q, kt) = (q.as_ptr(), keys_t.as_ptr());
        let mut acc = [[_mm512_setzero_ps(); 2]; SCORE_ROWS];
        for c in 0..d {
            let k = [_mm512_loadu_ps(kt.add(c * stride)), _mm512_loadu_ps(kt.add(c * stride + 16))];
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*q.add(r * d + c));
                acc[0] = _mm512_fmadd_ps(x, k[0], acc[0]);
                acc[1] = _mm512_fmadd_ps(x, k[1], acc[1]);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm512_storeu_ps(s.add(r * stride), acc[0]);
            _mm512_storeu_ps(s.add(r * stride + 16), acc[1]);
        }
    }

    /// The context rows: for each of `rows` query rows, `Σⱼ p[r, j] · v[j]` over the `seq` keys,
    /// in tiles of `R` rows × `L` 16-lane registers (the head's width), into `out` (rows
    /// `out_stride` apart).
    ///
    /// # Safety
    /// AVX-512 F; `p` holds `rows` rounded up to `R` rows of `stride` ≥ `seq` floats; `v` `seq`
    /// rows of `16·L`; `out` `rows` writable rows of `16·L`.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn value_rows<const R: usize, const L: usize>(p: &[f32], stride: usize, v: &[f32], seq: usize, rows: usize, out: *mut f32, out_stride: usize) {
        let d = 16 * L;
        debug_assert!(p.len() >= rows.next_multiple_of(R) * stride && v.len() == seq * d);
        let (p, v) = (p.as_ptr(), v.as_ptr());
        for first in (0..rows).step_by(R) {
            let mut acc = [[_mm512_setzero_ps(); L]; R];
            for j in 0..seq {
                let mut values = [_mm512_setzero_ps(); L];
                for (l, value) in values.iter_mut().enumerate() {
                    *value = _mm512_loadu_ps(v.add(j * d + 16 * l));
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(*p.add((first + r) * stride + j));
                    for l in 0..L {
                        acc[l] = _mm512_fmadd_ps(x, values[l], acc[l]);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows - first) {
                for (l, &sums) in acc.iter().enumerate() {
                    _mm512_storeu_ps(out.add((first + r) * out_stride + 16 * l), sums);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    /// Query rows of the AVX2 scores tile: it divides [`super::SCORE_ROWS`], the padding of the
    /// rows.
    pub(super) const SCORE_ROWS: usize = 6;
    /// Keys of the AVX2 scores tile (two 8-lane registers): it divides [`super::SCORE_KEYS`].
    pub(super) const SCORE_KEYS: usize = 16;

    /// [`super::avx512::score_tile`] at half the width: [`SCORE_ROWS`] query rows ×
    /// [`SCORE_KEYS`] keys, 12 sums in registers.
    ///
    /// # Safety
    /// AVX2 and FMA; `q` holds the rows, `keys_t` `d` rows of `SCORE_KEYS` from its start, `s`
    /// `SCORE_ROWS` rows of `SCORE_KEYS` writable floats.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn score_tile(q: &[f32], d: usize, keys_t: &[f32], stride: usize, s: *mut f32) {
        debug_assert!(q.len() >= SCORE_ROWS * d && keys_t.len() >= (d - 1) * stride + SCORE_KEYS);
        let (q, kt) = (q.as_ptr(), keys_t.as_ptr());
        let mut acc = [[_mm256_setzero_ps(); 2]; SCORE_ROWS];
        for c in 0..d {
            let k = [_mm256_loadu_ps(kt.add(c * stride)), _mm256_loadu_ps(kt.add(c * stride + 8))];
            for (r, acc) in acc.iter_mut().enumerate() {
                let x = _mm256_broadcast_ss(&*q.add(r * d + c));
                acc[0] = _mm256_fmadd_ps(x, k[0], acc[0]);
                acc[1] = _mm256_fmadd_ps(x, k[1], acc[1]);
            }
        }
        for (r, acc) in acc.iter().enumerate() {
            _mm256_storeu_ps(s.add(r * stride), acc[0]);
            _mm256_storeu_ps(s.add(r * stride + 8), acc[1]);
        }
    }

    /// [`super::avx512::value_rows`] with `L` 8-lane registers for the head's width.
    ///
    /// # Safety
    /// AVX2 and FMA; `p` holds `rows` rounded up to `R` rows of `stride` ≥ `seq` floats; `v`
    /// `seq` rows of `8·L`; `out` `rows` writable rows of `8·L`.
    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn value_rows<const R: usize, const L: usize>(p: &[f32], stride: usize, v: &[f32], seq: usize, rows: usize, out: *mut f32, out_stride: usize) {
        let d = 8 * L;
        debug_assert!(p.len() >= rows.next_multiple_of(R) * stride && v.len() == seq * d);
        let (p, v) = (p.as_ptr(), v.as_ptr());
        for first in (0..rows).step_by(R) {
            let mut acc = [[_mm256_setzero_ps(); L]; R];
            for j in 0..seq {
                let mut weights = [_mm256_setzero_ps(); R];
                for (r, weight) in weights.iter_mut().enumerate() {
                    *weight = _mm256_broadcast_ss(&*p.add((first + r) * stride + j));
                }
                for l in 0..L {
                    let value = _mm256_loadu_ps(v.add(j * d + 8 * l));
                    for (acc, &weight) in acc.iter_mut().zip(&weights) {
                        acc[l] = _mm256_fmadd_ps(weight, value, acc[l]);
                    }
                }
            }
            for (r, acc) in acc.iter().enumerate().take(rows - first) {
                for (l, &sums) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.add((first + r) * out_stride + 8 * l), sums);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::values;


    /// Attention written out in f64.
    #[allow(clippy::too_many_arguments)]
    fn reference(q: &[f32], k: &[f32], v: &[f32], batch: usize, heads: usize, seq: usize, d: usize, mask: Option<&[f32]>) -> Vec<f32> {
        let mut out = vec![0f32; batch * seq * heads * d];
        for b in 0..batch {
            for h in 0..heads {
                let at = |t: &[f32], j: usize, c: usize| f64::from(t[((b * heads + h) * seq + j) * d + c]);
                for i in 0..seq {
                    let scores: Vec<f64> = (0..seq)
                        .map(|j| (0..d).map(|c| at(q, i, c) * at(k, j, c)).sum::<f64>() + mask.map_or(0.0, |m| f64::from(m[b * seq + j])))
                        .collect();
                    let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                    let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..d {
                        let x: f64 = e.iter().enumerate().map(|(j, p)| p / sum * at(v, j, c)).sum();
                        out[((b * seq + i) * heads + h) * d + c] = x as f32;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn matches_the_reference_for_every_head_width_with_padding() {
        // Head widths with and without AVX-512 tiles; sequences not a multiple of the tiles, one
        // long enough for several query blocks; one input padded.
        assert!(query_block(1400) < 1400);
        for (batch, heads, seq, d) in [(2, 1, 1400, 32), (2, 3, 61, 32), (1, 2, 50, 64), (2, 1, 13, 16), (1, 2, 9, 48), (2, 2, 7, 20), (1, 1, 1, 32)] {
            let n = batch * heads * seq * d;
            let (q, k, v) = (values(n, 1), values(n, 2), values(n, 3));
            let mut mask = vec![0f32; batch * seq];
            if batch > 1 {
                for m in &mut mask[seq + seq / 2..] {
                    *m = f32::MIN;
                }
            }
            let want = reference(&q, &k, &v, batch, heads, seq, d, Some(&mask));
            let mut got = vec![f32::NAN; n];
            attention(&q, &k, &v, batch, heads, seq, d, Some(&mask), &mut got);
            let worst = want.iter().zip(&got).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(worst < 1e-5, "{batch}×{heads}×{seq}×{d}: worst difference {worst}");
            let mut plain = vec![f32::NAN; n];
            attention(&q, &k, &v, batch, heads, seq, d, None, &mut plain);
            let unmasked = reference(&q, &k, &v, batch, heads, seq, d, None);
            let worst = unmasked.iter().zip(&plain).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            assert!(worst < 1e-5, "{batch}×{heads}×{seq}×{d} without a mask: worst difference {worst}");
        }
    }

    #[test]
    fn the_plain_loops_agree_with_the_tiles() {
        for (fast, d) in [(Fast::for_head_dim(32), 32), (avx2_or_plain(8), 8), (avx2_or_plain(24), 24), (avx2_or_plain(32), 32), (avx2_or_plain(40), 40), (avx2_or_plain(64), 64)] {
            plain_loops_agree_with(fast, d);
        }
    }

    #[test]
    fn a_cpu_with_avx2_and_without_avx512_takes_the_avx2_tiles() {
        #[cfg(target_arch = "x86_64")]
        if !is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            assert!(matches!(Fast::for_head_dim(32), Fast::Avx2 { value_lanes: 4 }));
            assert!(matches!(Fast::for_head_dim(64), Fast::Avx2 { value_lanes: 8 }));
            assert!(matches!(Fast::for_head_dim(20), Fast::Plain));
        }
    }

    /// The AVX2 tiles for head width `d` where the CPU has them, whatever else it has.
    fn avx2_or_plain(d: usize) -> Fast {
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return Fast::Avx2 { value_lanes: d / 8 };
        }
        Fast::Plain
    }

    fn plain_loops_agree_with(fast: Fast, d: usize) {
        let (heads, seq) = (2, 70);
        let n = heads * seq * d;
        let (q, k, v) = (values(n, 4), values(n, 5), values(n, 6));
        let mut tiles = vec![0f32; n];
        let mut plain = vec![0f32; n];
        for h in 0..heads {
            let head = h * seq * d..(h + 1) * seq * d;
            let keys_t = transposed_keys(&k[head.clone()], 1, seq, d);
            let query_block = MIN_QUERY_BLOCK;
            for block in 0..seq.div_ceil(query_block) {
                let first = block * query_block;
                let rows = query_block.min(seq - first);
                let job = Job { q: &q[head.start + first * d..head.start + (first + rows) * d], keys_t: &keys_t, v: &v[head.clone()], mask: None, seq, head_dim: d, rows };
                job.run(&mut Scratch::default(), Fast::Plain, plain[first * heads * d + h * d..].as_mut_ptr(), heads * d);
                job.run(&mut Scratch::default(), fast, tiles[first * heads * d + h * d..].as_mut_ptr(), heads * d);
            }
        }
        let worst = tiles.iter().zip(&plain).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst < 1e-6, "head width {d}: worst difference {worst}");
    }
}
