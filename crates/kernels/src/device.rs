//! Finding a wgpu device that works. cubecl panics on a machine without a usable adapter, and
//! some adapters lack what training needs (atomic float adds, used by the gradient of an
//! embedding lookup), so every candidate is tried on a small forward and backward first.

use burn::tensor::wgpu::WgpuBackend;
use burn::tensor::{Device, DeviceKind, Int, Tensor, TensorData};

/// The graphics APIs tried, best first. Never OpenGL, which `Device::wgpu` falls back to when
/// Vulkan is missing: it has no float atomics, and on Mesa (llvmpipe over EGL) cubecl's first
/// kernel hung there instead of failing.
#[cfg(target_os = "macos")]
const APIS: [WgpuBackend; 1] = [WgpuBackend::Metal];
#[cfg(not(target_os = "macos"))]
const APIS: [WgpuBackend; 2] = [WgpuBackend::Vulkan, WgpuBackend::Dx12];

/// Why wgpu gave no device, in wgpu's or cubecl's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoWgpuAdapter(pub String);

/// A wgpu device whose adapter runs what headlab runs: the default adapter (a GPU where there
/// is one), else a CPU adapter such as Mesa's lavapipe, on the first of [`APIS`] that has one.
/// The probe runs once per process.
pub fn wgpu_device() -> Result<Device, NoWgpuAdapter> {
    static PROBED: std::sync::OnceLock<Result<Device, NoWgpuAdapter>> = std::sync::OnceLock::new();
    PROBED
        .get_or_init(|| probe_wgpu().map_err(NoWgpuAdapter))
        .clone()
}

fn probe_wgpu() -> Result<Device, String> {
    let previous = std::panic::take_hook();
    let messages = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = messages.clone();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(mut m) = sink.lock() {
            m.push(info.to_string());
        }
    }));
    let mut refused = Vec::new();
    let mut probe = |api: WgpuBackend, kind: DeviceKind| {
        let init = std::panic::catch_unwind(|| {
            Device::wgpu_options()
                .device_kind(kind)
                .graphics_api(api)
                .init()
                .map(|device| works(&device).then_some(device))
        });
        match init {
            Ok(Ok(device)) => device,
            Ok(Err(e)) => {
                refused.push(format!("{api:?}: {e}"));
                None
            }
            Err(_) => None,
        }
    };
    let found = APIS.iter().find_map(|&api| {
        probe(api, DeviceKind::DefaultDevice).or_else(|| probe(api, DeviceKind::Cpu))
    });
    std::panic::set_hook(previous);
    found.ok_or_else(|| {
        // The panic that says why (cubecl's device thread), not the channel errors that
        // follow it in the threads waiting on that one.
        let messages = messages.lock().map(|m| m.clone()).unwrap_or_default();
        let reasons: Vec<String> = messages
            .iter()
            .map(|m| {
                m.lines()
                    .skip(1)
                    .collect::<Vec<_>>()
                    .join(" ")
                    .trim()
                    .to_string()
            })
            .filter(|m| !m.is_empty())
            .collect();
        reasons
            .iter()
            .find(|m| !m.contains("RecvError") && !m.contains("SendError"))
            .or(reasons.first())
            .cloned()
            .or_else(|| refused.first().cloned())
            .unwrap_or_else(|| {
                "no adapter computed a sum and a scatter-add's gradient right (a driver without \
                 float atomics?)"
                    .into()
            })
    })
}

/// A sum, and the gradient of a repeated row lookup (two rows add into one: a scatter-add of
/// floats), computed right.
fn works(device: &Device) -> bool {
    let sum: f32 = Tensor::<1>::ones([4], device).sum().into_scalar();
    let train = device.clone().autodiff();
    let table = Tensor::<2>::ones([3, 2], &train).require_grad();
    let ids = Tensor::<1, Int>::from_data(TensorData::new(vec![1i64, 1], [2]), &train);
    let grads = table.clone().select(0, ids).sum().backward();
    let grad: Vec<f32> = table
        .grad(&grads)
        .map(|g| g.into_data().try_to_vec::<f32>().unwrap_or_default())
        .unwrap_or_default();
    sum == 4.0 && grad == [0.0, 0.0, 2.0, 2.0, 0.0, 0.0]
}

/// For tests: a working wgpu device, or `None` after a `skipped:` line. With
/// `HEADLAB_REQUIRE_WGPU=1` (CI sets it) a missing adapter is a failure instead.
///
/// # Panics
/// Without an adapter when `HEADLAB_REQUIRE_WGPU=1`.
pub fn wgpu_for_tests() -> Option<Device> {
    let required = std::env::var("HEADLAB_REQUIRE_WGPU").is_ok_and(|v| v == "1");
    match wgpu_device() {
        Ok(device) => Some(device),
        Err(why) if required => panic!(
            "HEADLAB_REQUIRE_WGPU=1 but no wgpu adapter works ({why}): install a Vulkan \
             driver (Debian: apt-get install mesa-vulkan-drivers)"
        ),
        Err(why) => {
            eprintln!(
                "skipped: no wgpu adapter ({why}; install mesa-vulkan-drivers for lavapipe, or \
                 set HEADLAB_REQUIRE_WGPU=1 to make this a failure)"
            );
            None
        }
    }
}
