//! Backends by name, and the devices they run on: the one place headlab names a backend.
//! Everything above this crate takes a `burn::tensor::Device` that [`BackendKind::device`]
//! gave it.
//!
//! ndarray and wgpu are cargo features of their own names, off in `cargo run`'s first build
//! and on in the test build: a build without one still knows its name and says how to build
//! it in ([`BackendError::NotBuilt`]). wgpu, where it is built in, needs care: cubecl panics
//! on a machine without a usable adapter, and some adapters lack what training needs (atomic
//! float adds, used by the gradient of an embedding lookup), so every candidate is tried on a
//! small forward and backward first ([`wgpu_device`]).

use std::fmt;
use std::str::FromStr;

use burn::tensor::Device;
#[cfg(feature = "wgpu")]
use burn::tensor::wgpu::WgpuBackend;
#[cfg(feature = "wgpu")]
use burn::tensor::{DeviceKind, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A backend headlab can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// Burn's ndarray CPU backend (deprecated upstream in favour of flex; kept to compare).
    Ndarray,
    /// Burn's flex CPU backend, with headlab's kernels.
    #[default]
    Flex,
    /// flex with headlab's kernels switched off: Burn's own ops on the same device, the
    /// witness that checks the kernels (`headlab compare`) and the baseline they are timed
    /// against (`headlab-bench`).
    #[serde(rename = "flex-burn")]
    FlexBurn,
    /// Burn's wgpu backend: Vulkan, Metal or DX12, or Mesa's lavapipe on a CPU.
    Wgpu,
}

/// Every backend, in the order they are listed to users.
pub const BACKENDS: [BackendKind; 4] = [
    BackendKind::Flex,
    BackendKind::FlexBurn,
    BackendKind::Ndarray,
    BackendKind::Wgpu,
];

/// A backend that cannot be used.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum BackendError {
    /// Not a backend name.
    #[error("unknown backend {0:?}: choose one of flex, flex-burn, ndarray, wgpu")]
    Unknown(String),
    /// wgpu found no working adapter.
    #[error(
        "the wgpu backend found no working GPU adapter ({0}). Install a Vulkan driver (on \
         Debian/Ubuntu without a GPU: `apt-get install mesa-vulkan-drivers` gives the lavapipe \
         CPU adapter) or choose --backend flex"
    )]
    NoAdapter(String),
    /// This binary was built without the backend's cargo feature.
    #[error(
        "this headlab was built without the {0} backend (a cargo feature, left out of `cargo \
         run` to keep the first build short): build it in with `cargo run --release --features \
         {0} -- ...` (a few minutes), or choose --backend flex"
    )]
    NotBuilt(BackendKind),
}

/// Whether this binary has Burn's wgpu backend (the `wgpu` cargo feature).
pub const WGPU_BUILT: bool = cfg!(feature = "wgpu");
/// Whether this binary has Burn's ndarray backend (the `ndarray` cargo feature).
pub const NDARRAY_BUILT: bool = cfg!(feature = "ndarray");

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Ndarray => "ndarray",
            BackendKind::Flex => "flex",
            BackendKind::FlexBurn => "flex-burn",
            BackendKind::Wgpu => "wgpu",
        })
    }
}

impl FromStr for BackendKind {
    type Err = BackendError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ndarray" => Ok(BackendKind::Ndarray),
            "flex" => Ok(BackendKind::Flex),
            "flex-burn" => Ok(BackendKind::FlexBurn),
            "wgpu" => Ok(BackendKind::Wgpu),
            _ => Err(BackendError::Unknown(s.to_string())),
        }
    }
}

impl BackendKind {
    /// The device for this backend, checked to work. Inference devices have no autodiff; add
    /// it with `.autodiff()` for training.
    pub fn device(self) -> Result<Device, BackendError> {
        match self {
            BackendKind::Ndarray => ndarray_device(),
            BackendKind::Flex | BackendKind::FlexBurn => Ok(Device::flex()),
            BackendKind::Wgpu => wgpu_device(),
        }
    }

    /// Whether this binary has the backend (ndarray and wgpu are cargo features).
    pub fn built(self) -> bool {
        match self {
            BackendKind::Ndarray => NDARRAY_BUILT,
            BackendKind::Flex | BackendKind::FlexBurn => true,
            BackendKind::Wgpu => WGPU_BUILT,
        }
    }

    /// Whether headlab's kernels run on this backend's device: run its work inside
    /// [`crate::with_kernels`]`(backend.kernels(), ..)`.
    pub fn kernels(self) -> bool {
        self != BackendKind::FlexBurn
    }
}

#[cfg(feature = "ndarray")]
#[allow(deprecated)]
fn ndarray_device() -> Result<Device, BackendError> {
    Ok(Device::ndarray())
}

#[cfg(not(feature = "ndarray"))]
fn ndarray_device() -> Result<Device, BackendError> {
    Err(BackendError::NotBuilt(BackendKind::Ndarray))
}

/// Stack of rayon's worker threads: `f` in [`on_compute_pool`] runs on one of them, and
/// Burn's autodiff graph can be deep.
const WORKER_STACK: usize = 16 << 20;

/// Runs `f` on a thread of rayon's global pool (`RAYON_NUM_THREADS` threads, default one per
/// core), so that the CPU kernels' parallel loops start where they are called. From any other
/// thread each loop is handed to the pool and the caller sleeps until it is done: with one
/// thread that handoff, two context switches per op, was several percent of a training step.
pub fn on_compute_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    // Fails only if the pool was already built (a second call): then that one is used.
    let _ = rayon::ThreadPoolBuilder::new()
        .stack_size(WORKER_STACK)
        .build_global();
    rayon::scope(|_| f())
}

/// The adapter a device runs on, where its backend names one (wgpu on lavapipe: `llvmpipe
/// (LLVM 15.0.6, 256 bits)`); `None` for the CPU backends. Opens the device.
pub fn adapter_name(device: &Device) -> Option<String> {
    #[cfg(feature = "wgpu")]
    return device.identity().map(|identity| identity.name);
    #[cfg(not(feature = "wgpu"))]
    {
        let _ = device;
        None
    }
}

/// The graphics APIs tried, best first. Never OpenGL, which `Device::wgpu` falls back to when
/// Vulkan is missing: it has no float atomics, and on Mesa (llvmpipe over EGL) cubecl's first
/// kernel hung there instead of failing.
#[cfg(all(feature = "wgpu", target_os = "macos"))]
const APIS: [WgpuBackend; 1] = [WgpuBackend::Metal];
#[cfg(all(feature = "wgpu", not(target_os = "macos")))]
const APIS: [WgpuBackend; 2] = [WgpuBackend::Vulkan, WgpuBackend::Dx12];

/// A wgpu device whose adapter runs what headlab runs: the default adapter (a GPU where there
/// is one), else a CPU adapter such as Mesa's lavapipe, on the first of [`APIS`] that has one.
/// The probe runs once per process. Without the `wgpu` feature there is none
/// ([`BackendError::NotBuilt`]); without an adapter, [`BackendError::NoAdapter`] says why in
/// wgpu's or cubecl's words.
pub fn wgpu_device() -> Result<Device, BackendError> {
    #[cfg(feature = "wgpu")]
    {
        static PROBED: std::sync::OnceLock<Result<Device, String>> = std::sync::OnceLock::new();
        PROBED
            .get_or_init(probe_wgpu)
            .clone()
            .map_err(BackendError::NoAdapter)
    }
    #[cfg(not(feature = "wgpu"))]
    Err(BackendError::NotBuilt(BackendKind::Wgpu))
}

#[cfg(feature = "wgpu")]
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
                .map(|device| {
                    tune_briefly_on_a_cpu(&device);
                    works(&device).then_some(device)
                })
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

/// On a CPU adapter (Mesa's lavapipe), cubecl's autotuning takes each op's first candidate that
/// runs instead of compiling and timing them all. There, one matmul candidate (cubek's simple
/// unit matmul at its smallest tiles) took 5-13 s per shape to compile and time, and a tiny
/// model's first step tuned 14 shapes (bench/NOTES.md), more than a run on a CPU adapter wins
/// back from the faster pick. How: a tuning round ends at the first candidate within its time
/// limit, the roofline time plus one launch's overhead; this states that overhead as 1 s, in
/// the cache cubecl fills before its first round. A GPU (a card) tunes as Burn ships it.
#[cfg(feature = "wgpu")]
fn tune_briefly_on_a_cpu(device: &Device) {
    use burn::cubecl::throughput::ThroughputValue;
    let Some(client) = cpu_adapter_client(device) else {
        return;
    };
    // Kept only where cubecl has not measured one yet: before the first tuned op.
    let _ = client.measure_throughput(LAUNCH, || {
        Ok(ThroughputValue {
            ops_count: 1,
            duration: CPU_LAUNCH_OVERHEAD,
        })
    });
}

/// The launch overhead a CPU adapter's tuning is told ([`tune_briefly_on_a_cpu`]): longer than
/// any candidate's run at the sizes headlab trains, shorter than their compiles add up to.
#[cfg(feature = "wgpu")]
const CPU_LAUNCH_OVERHEAD: std::time::Duration = std::time::Duration::from_secs(1);

/// cubecl's cache key of the launch overhead.
#[cfg(feature = "wgpu")]
const LAUNCH: burn::cubecl::throughput::ThroughputKey = burn::cubecl::throughput::ThroughputKey {
    mode: burn::cubecl::throughput::ThroughputMode::Launch,
};

/// The compute client of a wgpu device on a CPU adapter; `None` on a GPU. cubecl-wgpu leaves
/// `DeviceIdentity::physical` empty exactly for wgpu's `DeviceType::Cpu`.
#[cfg(feature = "wgpu")]
fn cpu_adapter_client(device: &Device) -> Option<burn::cubecl::client::Client> {
    let on_a_card = device.identity().is_none_or(|id| id.physical.is_some());
    match device.as_dispatch() {
        burn::backend::DispatchDevice::Cube(cube) if !on_a_card => Some(cube.client()),
        _ => None,
    }
}

/// A sum, and the gradient of a repeated row lookup (two rows add into one: a scatter-add of
/// floats), computed right.
#[cfg(feature = "wgpu")]
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
    if !WGPU_BUILT {
        assert!(
            !required,
            "HEADLAB_REQUIRE_WGPU=1 but this test binary was built without the wgpu feature: run \
             the workspace's tests (`cargo test --release --workspace`) or add `--features \
             headlab-kernels/wgpu`"
        );
        eprintln!("skipped: built without the wgpu feature");
        return None;
    }
    match wgpu_device() {
        Ok(device) => Some(device),
        Err(why) if required => panic!("HEADLAB_REQUIRE_WGPU=1 but {why}"),
        Err(why) => {
            eprintln!("skipped: {why} (HEADLAB_REQUIRE_WGPU=1 makes this a failure)");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_valid_ones() {
        for b in BACKENDS {
            assert_eq!(b.to_string().parse::<BackendKind>().unwrap(), b);
        }
        let err = "cuda".parse::<BackendKind>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown backend \"cuda\": choose one of flex, flex-burn, ndarray, wgpu"
        );
    }

    /// A binary without a backend names the cargo feature that builds it in, and that
    /// feature is one this crate's manifest declares (a renamed feature fails here).
    #[test]
    fn a_backend_left_out_names_the_feature_that_builds_it_in() {
        let manifest = include_str!("../Cargo.toml");
        let features = manifest
            .split("[features]")
            .nth(1)
            .expect("a [features] table");
        for b in [BackendKind::Wgpu, BackendKind::Ndarray] {
            let feature = features
                .lines()
                .map(|l| l.split('=').next().unwrap_or("").trim())
                .find(|name| *name == b.to_string())
                .unwrap_or_else(|| panic!("no `{b}` feature in crates/kernels/Cargo.toml"));
            let err = BackendError::NotBuilt(b).to_string();
            let fix = format!("cargo run --release --features {feature} -- ");
            assert!(err.contains(&fix), "{err}");
            assert!(err.contains("--backend flex"), "{err}");
        }
        // flex and flex-burn are always there: they are what `cargo run` builds.
        assert!(BackendKind::Flex.built() && BackendKind::FlexBurn.built());
    }

    /// On a CPU adapter (lavapipe in CI) the launch overhead cubecl's tuning reads is the one
    /// the probe stated, not one cubecl measured (microseconds there): each tuning round ends
    /// at its first candidate that runs. A GPU keeps its own measurement.
    #[cfg(feature = "wgpu")]
    #[test]
    fn a_cpu_adapter_ends_each_tuning_round_at_its_first_candidate() {
        use burn::cubecl::throughput::ThroughputError;
        let Some(device) = wgpu_for_tests() else {
            return;
        };
        let Some(client) = cpu_adapter_client(&device) else {
            eprintln!("skipped: a GPU adapter tunes as Burn ships it");
            return;
        };
        let stated = client
            .measure_throughput(LAUNCH, || Err(ThroughputError::Launch))
            .expect("the probe stated a launch overhead");
        assert_eq!(stated.duration_per_op(), CPU_LAUNCH_OVERHEAD);
    }
}
