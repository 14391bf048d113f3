//! Output buffers written once, never zeroed first: every element of an elementwise kernel's
//! output (GELU, LayerNorm, AdamW, ...) is overwritten at once, so zeroing it first is wasted
//! memory traffic (measured in bench/NOTES.md). Buffers that are added into are zeroed chunk
//! by chunk on rayon's pool ([`zeroed`]).

use std::mem::MaybeUninit;

use rayon::prelude::*;

/// `N` fresh buffers of `(len, chunk)` each, handed to `write` in matching chunks: call
/// `write(i, ..)` gets chunk `i` of every buffer (`i * chunk..`, the last one shorter), on rayon's pool when
/// there are several. Returns the buffers and each call's result, in chunk order.
///
/// `write` must set every element of every chunk it gets (each call site's loop runs over the
/// whole chunk, zipped or indexed, with the inputs' lengths asserted to match; [`zeroed`]
/// fills each chunk first).
///
/// # Panics
/// If the buffers do not split into the same number of chunks.
pub(crate) fn fresh<const N: usize, R: Send>(
    shapes: [(usize, usize); N],
    write: impl Fn(usize, [&mut [MaybeUninit<f32>]; N]) -> R + Sync,
) -> ([Vec<f32>; N], Vec<R>) {
    let count = |(len, chunk): (usize, usize)| len.div_ceil(chunk.max(1));
    let chunks = shapes.first().map_or(0, |&s| count(s));
    assert!(
        shapes.iter().all(|&s| count(s) == chunks),
        "fresh: buffers {shapes:?} split into different numbers of chunks"
    );
    let mut buffers: [Vec<f32>; N] = shapes.map(|(len, _)| Vec::with_capacity(len));
    let results = {
        let mut parts: Vec<_> = buffers
            .iter_mut()
            .zip(shapes)
            .map(|(b, (len, chunk))| b.spare_capacity_mut()[..len].chunks_mut(chunk.max(1)))
            .collect();
        let tasks: Vec<(usize, [&mut [MaybeUninit<f32>]; N])> = (0..chunks)
            .map(|i| {
                (
                    i,
                    std::array::from_fn(|j| parts[j].next().expect("counted above")),
                )
            })
            .collect();
        let run = |(i, chunks)| write(i, chunks);
        if tasks.len() <= 1 {
            tasks.into_iter().map(run).collect::<Vec<R>>()
        } else {
            tasks.into_par_iter().map(run).collect()
        }
    };
    for (buffer, (len, _)) in buffers.iter_mut().zip(shapes) {
        // SAFETY: the capacity is `len`, and its `len` elements were split into chunks that
        // `write` was given and set (its contract above); a panic in `write` leaves the
        // buffers empty, never partly set.
        #[allow(unsafe_code)]
        unsafe {
            buffer.set_len(len);
        }
    }
    (buffers, results)
}

/// [`fresh`] buffers of zeros for `write` to add into: each chunk is zeroed by the task that
/// gets it, so the zeroing runs on rayon's pool too instead of before it, on one thread.
pub(crate) fn zeroed<const N: usize, R: Send>(
    shapes: [(usize, usize); N],
    write: impl Fn(usize, [&mut [f32]; N]) -> R + Sync,
) -> ([Vec<f32>; N], Vec<R>) {
    fresh(shapes, |i, chunks| {
        let chunks = chunks.map(|chunk| {
            for v in chunk.iter_mut() {
                v.write(0.0);
            }
            // SAFETY: every element of `chunk` was set just above, and `MaybeUninit<f32>` has
            // `f32`'s layout.
            #[allow(unsafe_code)]
            unsafe {
                &mut *(chunk as *mut [MaybeUninit<f32>] as *mut [f32])
            }
        });
        write(i, chunks)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_chunk_is_handed_out_once_in_order() {
        // 10 values in chunks of 4 beside 5 in chunks of 2: three chunks each, run in parallel.
        let ([a, b], lens) = fresh([(10, 4), (5, 2)], |chunk, [a, b]| {
            for (i, v) in a.iter_mut().enumerate() {
                v.write((chunk * 100 + i) as f32);
            }
            for v in b.iter_mut() {
                v.write(chunk as f32);
            }
            (a.len(), b.len())
        });
        assert_eq!(lens, vec![(4, 2), (4, 2), (2, 1)]);
        assert_eq!(a, vec![0., 1., 2., 3., 100., 101., 102., 103., 200., 201.]);
        assert_eq!(b, vec![0., 0., 1., 1., 2.]);
        let ([empty], none) = fresh([(0, 8)], |_, _: [&mut [MaybeUninit<f32>]; 1]| ());
        assert!(empty.is_empty() && none.is_empty());
    }

    #[test]
    fn zeroed_chunks_start_at_zero_and_keep_what_is_added() {
        // 7 values in chunks of 3: each task adds its chunk number plus one to what it got.
        let ([a], sums) = zeroed([(7, 3)], |chunk, [a]| {
            let before: f32 = a.iter().sum();
            for v in a.iter_mut() {
                *v += chunk as f32 + 1.0;
            }
            before
        });
        assert_eq!(sums, vec![0.0, 0.0, 0.0]);
        assert_eq!(a, vec![1., 1., 1., 2., 2., 2., 3.]);
    }
}
