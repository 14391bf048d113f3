//! QK-norm and RoPE through headlab's kernel against the same map in Burn's ops (each tested
//! against f64 in headlab-model's tests; the kernel itself against f64 and finite differences
//! in headlab-kernels): values and gradients, from both layouts.

use burn::tensor::{Tensor, TensorData};
use headlab_attention::Position;
use headlab_kernels::{to_host, with_kernels};

use crate::common::{cpu_devices, max_abs_diff, random_vec, rng};

/// The output and the input's gradient of `sum(position(x) * r)` for `x [b, t, h, d_k]` as
/// the projections make it: through `heads_last` on it, or through `heads_first` on its
/// `[b, h, t, d_k]` view.
fn run(
    position: Position,
    heads_last: bool,
    device: &burn::tensor::Device,
    x: &[f32],
    r: &[f32],
) -> [Vec<f32>; 2] {
    let (b, t, h, d_k) = (2, 5, 3, 8);
    let x =
        Tensor::<4>::from_data(TensorData::new(x.to_vec(), [b, t, h, d_k]), device).require_grad();
    let r = Tensor::<4>::from_data(TensorData::new(r.to_vec(), [b, t, h, d_k]), device);
    let y = if heads_last {
        position.heads_last(x.clone())
    } else {
        // [b, t, h, d_k] -> [b, h, t, d_k] -> [b, t, h, d_k]
        position
            .heads_first(x.clone().swap_dims(1, 2))
            .swap_dims(1, 2)
    };
    let grads = y.clone().mul(r).sum().backward();
    [to_host(y), to_host(x.grad(&grads).unwrap())]
}

#[test]
fn the_kernel_matches_burns_ops_and_rope_alone_to_the_bit() {
    let mut rng = rng(3);
    let n = 2 * 5 * 3 * 8;
    let (x, r) = (random_vec(&mut rng, n), random_vec(&mut rng, n));
    let variants = [
        (Some(1e-6), true, 0),
        (Some(1e-6), true, 4),
        (None, true, 7),
        (Some(1e-6), false, 0),
    ];
    for (name, device) in cpu_devices() {
        let device = device.autodiff();
        for ((rms_epsilon, rope, offset), heads_last) in
            variants.into_iter().flat_map(|v| [(v, false), (v, true)])
        {
            let position = Position {
                rms_epsilon,
                rope,
                offset,
            };
            let kernel = run(position, heads_last, &device, &x, &r);
            let ops = with_kernels(false, || run(position, heads_last, &device, &x, &r));
            for (what, k, o) in [
                ("values", &kernel[0], &ops[0]),
                ("gradient", &kernel[1], &ops[1]),
            ] {
                let diff = max_abs_diff(k, o);
                // The rotation is the same f32 arithmetic; the norm sums in another order.
                let tolerance = if rms_epsilon.is_some() { 1e-5 } else { 0.0 };
                assert!(
                    diff <= tolerance,
                    "{name} {position:?} heads_last {heads_last}: {what} differ by {diff}"
                );
            }
        }
    }
}
