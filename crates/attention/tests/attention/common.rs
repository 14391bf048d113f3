//! Test helpers: the backends every test runs on, and random data.

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{Device, Tensor, TensorData};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The CPU backends every test runs on.
#[allow(deprecated)]
pub fn cpu_devices() -> Vec<(&'static str, Device)> {
    vec![("flex", Device::flex()), ("ndarray", Device::ndarray())]
}

/// A wgpu device if an adapter works here (see [`headlab_kernels::wgpu_for_tests`]).
pub fn wgpu_device() -> Option<Device> {
    headlab_kernels::wgpu_for_tests()
}

/// Seeded standard-normal-ish values (uniform in [-1, 1) is enough for these checks).
pub fn random_vec(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

/// A random tensor of the given shape.
pub fn random_tensor<const D: usize>(
    rng: &mut StdRng,
    shape: [usize; D],
    device: &Device,
) -> Tensor<D> {
    let n = shape.iter().product();
    Tensor::from_data(TensorData::new(random_vec(rng, n), shape), device)
}

/// Replaces every weight and bias of `linear` with random values of scale `scale`.
pub fn randomize_linear(linear: &mut Linear, rng: &mut StdRng, scale: f32, device: &Device) {
    let [d_in, d_out] = linear.weight.val().dims();
    linear.weight = Param::from_tensor(random_tensor(rng, [d_in, d_out], device).mul_scalar(scale));
    if linear.bias.is_some() {
        linear.bias = Some(Param::from_tensor(
            random_tensor(rng, [d_out], device).mul_scalar(scale),
        ));
    }
}

/// A seeded RNG.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// Largest absolute difference between two slices of equal length.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
