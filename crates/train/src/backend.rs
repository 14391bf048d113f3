//! Picking a Burn backend by name at run time: the one place that names backends.

use std::fmt;
use std::str::FromStr;

use burn::tensor::Device;
use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A backend headlab can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
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
pub const BACKENDS: [Backend; 4] = [
    Backend::Flex,
    Backend::FlexBurn,
    Backend::Ndarray,
    Backend::Wgpu,
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
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Ndarray => "ndarray",
            Backend::Flex => "flex",
            Backend::FlexBurn => "flex-burn",
            Backend::Wgpu => "wgpu",
        })
    }
}

impl FromStr for Backend {
    type Err = BackendError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ndarray" => Ok(Backend::Ndarray),
            "flex" => Ok(Backend::Flex),
            "flex-burn" => Ok(Backend::FlexBurn),
            "wgpu" => Ok(Backend::Wgpu),
            _ => Err(BackendError::Unknown(s.to_string())),
        }
    }
}

impl Backend {
    /// The device for this backend, checked to work. Inference devices have no autodiff; add
    /// it with `.autodiff()` for training.
    #[allow(deprecated)]
    pub fn device(self) -> Result<Device, BackendError> {
        match self {
            Backend::Ndarray => Ok(Device::ndarray()),
            Backend::Flex | Backend::FlexBurn => Ok(Device::flex()),
            Backend::Wgpu => wgpu_device(),
        }
    }

    /// Whether headlab's kernels run on this backend's device: run its work inside
    /// `headlab_kernels::with_kernels(backend.kernels(), ..)`.
    pub fn kernels(self) -> bool {
        self != Backend::FlexBurn
    }
}

fn wgpu_device() -> Result<Device, BackendError> {
    headlab_kernels::wgpu_device().map_err(|e| BackendError::NoAdapter(e.0))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_list_the_valid_ones() {
        for b in BACKENDS {
            assert_eq!(b.to_string().parse::<Backend>().unwrap(), b);
        }
        let err = "cuda".parse::<Backend>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown backend \"cuda\": choose one of flex, flex-burn, ndarray, wgpu"
        );
    }
}
