//! AdamW with PyTorch's semantics, written out so its state can be saved and its choices seen.
//!
//! Differences from Burn's built-in optimizer that nanoGPT's recipe needs: weight decay only on
//! matrices (embeddings and linear weights, not biases or LayerNorm gains), clipping by the
//! global gradient norm (`clip_grad_norm_`), not per tensor, and a state keyed by parameter
//! name so a resumed run continues exactly.

use std::collections::HashMap;
use std::path::Path;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Tensor, TensorData};
use headlab_kernels::{AdamWStep, adamw, to_host};
use thiserror::Error;

/// Hyper-parameters of [`AdamW`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamWConfig {
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Decoupled weight decay, applied to parameters of rank >= 2 only.
    pub weight_decay: f64,
}

/// First and second moments of one parameter, flattened.
#[derive(Debug, Clone)]
struct Moments {
    m: Tensor<1>,
    v: Tensor<1>,
}

/// AdamW state: the step count and the moments of every parameter by name.
#[derive(Debug, Clone)]
pub struct AdamW {
    /// Hyper-parameters.
    pub config: AdamWConfig,
    /// Number of updates made.
    pub step: u64,
    state: HashMap<String, Moments>,
}

/// Optimizer state that could not be saved or restored.
#[derive(Debug, Error)]
pub enum OptimStateError {
    /// I/O.
    #[error("optimizer state {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Not a valid state file.
    #[error("optimizer state {path} is corrupt: {message}")]
    Corrupt {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// Tracks the dotted module path while visiting or mapping.
#[derive(Default)]
struct PathStack(Vec<String>);

impl PathStack {
    fn name(&self) -> String {
        self.0.join(".")
    }
}

/// Sums the squares of every gradient into one tensor, so one read gives the global norm.
struct SquaredNorm<'a> {
    grads: &'a GradientsParams,
    total: Option<Tensor<1>>,
}

impl ModuleVisitor for SquaredNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            let s = g.square().sum();
            self.total = Some(match self.total.take() {
                Some(t) => t + s,
                None => s,
            });
        }
    }
}

/// The L2 norm of all gradients together, as PyTorch's `clip_grad_norm_` computes it.
pub fn global_grad_norm<M: Module>(model: &M, grads: &GradientsParams) -> f64 {
    let mut visitor = SquaredNorm { grads, total: None };
    model.visit(&mut visitor);
    visitor.total.map_or(0.0, |t| t.into_scalar::<f64>().sqrt())
}

struct Update<'a> {
    optim: &'a mut AdamW,
    grads: &'a GradientsParams,
    lr: f64,
    grad_scale: f64,
    path: PathStack,
}

impl ModuleMapper for Update<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.0.push(name.to_string());
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.0.pop();
    }

    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(grad) = self.grads.get::<D>(param.id) else {
            return param;
        };
        let (id, tensor, mapper) = param.consume();
        let require_grad = tensor.is_require_grad();
        let shape = tensor.dims();
        let n: usize = shape.iter().product();
        let p = tensor.inner();
        let c = self.optim.config;
        let step = AdamWStep {
            lr: self.lr,
            beta1: c.beta1,
            beta2: c.beta2,
            eps: c.eps,
            weight_decay: if D >= 2 { c.weight_decay } else { 0.0 },
            grad_scale: self.grad_scale,
            step: self.optim.step as i32,
        };

        // [..] -> [n]: moments are stored flat so one map holds every rank.
        let name = self.path.name();
        let prev = self.optim.state.remove(&name).map(|prev| (prev.m, prev.v));
        let (updated, m, v) = adamw(p.reshape([n]), grad.reshape([n]), prev, &step);
        self.optim.state.insert(name, Moments { m, v });
        let updated = updated.reshape(shape);
        let mut updated = Tensor::from_inner(updated);
        if require_grad {
            updated = updated.require_grad();
        }
        Param::from_mapped_value(id, updated, mapper)
    }
}

impl AdamW {
    /// A fresh optimizer.
    pub fn new(config: AdamWConfig) -> Self {
        Self {
            config,
            step: 0,
            state: HashMap::new(),
        }
    }

    /// One update of every parameter that has a gradient, with the gradients multiplied by
    /// `grad_scale` first (the clipping factor).
    pub fn step<M: Module>(
        &mut self,
        model: M,
        grads: &GradientsParams,
        lr: f64,
        grad_scale: f64,
    ) -> M {
        self.step += 1;
        let mut update = Update {
            optim: self,
            grads,
            lr,
            grad_scale,
            path: PathStack::default(),
        };
        model.map(&mut update)
    }

    /// Writes the step count and moments as safetensors (`m.<param>` and `v.<param>`).
    pub fn save(&self, path: &Path) -> Result<(), OptimStateError> {
        let mut buffers: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for (name, moments) in &self.state {
            for (prefix, t) in [("m", &moments.m), ("v", &moments.v)] {
                let values = to_host::<f32, _>(t.clone());
                let bytes = values.iter().flat_map(|x| x.to_le_bytes()).collect();
                buffers.push((format!("{prefix}.{name}"), vec![values.len()], bytes));
            }
        }
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = buffers
            .iter()
            .map(|(name, shape, bytes)| {
                let view = safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    shape.clone(),
                    bytes,
                )
                .expect("shape matches bytes");
                (name.clone(), view)
            })
            .collect();
        let metadata = HashMap::from([("step".to_string(), self.step.to_string())]);
        let bytes = safetensors::serialize(views, Some(metadata)).map_err(|e| {
            OptimStateError::Corrupt {
                path: path.display().to_string(),
                message: e.to_string(),
            }
        })?;
        std::fs::write(path, bytes).map_err(|source| OptimStateError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads what [`save`](Self::save) wrote, onto `device`.
    pub fn load(
        config: AdamWConfig,
        path: &Path,
        device: &burn::tensor::Device,
    ) -> Result<Self, OptimStateError> {
        let shown = path.display().to_string();
        let corrupt = |message: String| OptimStateError::Corrupt {
            path: shown.clone(),
            message,
        };
        let bytes = std::fs::read(path).map_err(|source| OptimStateError::Io {
            path: shown.clone(),
            source,
        })?;
        let (_, meta) =
            safetensors::SafeTensors::read_metadata(&bytes).map_err(|e| corrupt(e.to_string()))?;
        let step = meta
            .metadata()
            .as_ref()
            .and_then(|m| m.get("step"))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| corrupt("no step count".into()))?;
        let tensors =
            safetensors::SafeTensors::deserialize(&bytes).map_err(|e| corrupt(e.to_string()))?;
        let read = |name: &str| -> Result<Tensor<1>, OptimStateError> {
            let view = tensors.tensor(name).map_err(|e| corrupt(e.to_string()))?;
            let values: Vec<f32> = view
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let n = values.len();
            Ok(Tensor::from_data(TensorData::new(values, [n]), device))
        };
        let mut state = HashMap::new();
        for name in tensors.names() {
            if let Some(param) = name.strip_prefix("m.") {
                let moments = Moments {
                    m: read(name)?,
                    v: read(&format!("v.{param}"))?,
                };
                state.insert(param.to_string(), moments);
            }
        }
        Ok(Self {
            config,
            step,
            state,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::Device;

    #[derive(Module, Debug)]
    struct Two {
        a: Linear,
    }

    /// Three AdamW steps on a linear layer against the update written out in f64. Long
    /// because the reference is written out in full, with no helper shared with the code.
    #[test]
    fn matches_adamw_written_out_in_f64_with_decay_only_on_matrices() {
        let device = Device::flex().autodiff();
        let cfg = AdamWConfig {
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.1,
        };
        let mut model = Two {
            a: LinearConfig::new(3, 2).init(&device),
        };
        let read = |t: Tensor<2>| to_host::<f32, _>(t);
        let mut w: Vec<f64> = read(model.a.weight.val())
            .iter()
            .map(|&x| x as f64)
            .collect();
        let mut b: Vec<f64> = to_host::<f32, _>(model.a.bias.as_ref().unwrap().val())
            .iter()
            .map(|&x| x as f64)
            .collect();
        let x = [0.5f64, -1.0, 2.0];
        let (mut mw, mut vw, mut mb, mut vb) =
            (vec![0.0; 6], vec![0.0; 6], vec![0.0; 2], vec![0.0; 2]);
        let mut optim = AdamW::new(cfg);
        let lr = 0.05;
        let scale = 0.5;
        for t in 1..=3 {
            // loss = sum(y * [1, -2]) with y = x W + b: dW[i][j] = x[i] * c[j], db = c.
            let c = [1.0, -2.0];
            let xt = Tensor::<2>::from_data(
                TensorData::new(x.iter().map(|&v| v as f32).collect(), [1, 3]),
                &device,
            );
            let ct = Tensor::<2>::from_data(TensorData::new(vec![1.0f32, -2.0], [1, 2]), &device);
            let loss = model.a.forward(xt).mul(ct).sum();
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(model, &grads, lr, scale);
            let adam = |p: &mut f64, m: &mut f64, v: &mut f64, g: f64, decay: bool| {
                let g = g * scale;
                *m = 0.9 * *m + 0.1 * g;
                *v = 0.99 * *v + 0.01 * g * g;
                let mh = *m / (1.0 - 0.9f64.powi(t));
                let vh = *v / (1.0 - 0.99f64.powi(t));
                if decay {
                    *p *= 1.0 - lr * 0.1;
                }
                *p -= lr * mh / (vh.sqrt() + 1e-8);
            };
            for i in 0..3 {
                for j in 0..2 {
                    adam(
                        &mut w[i * 2 + j],
                        &mut mw[i * 2 + j],
                        &mut vw[i * 2 + j],
                        x[i] * c[j],
                        true,
                    );
                }
            }
            for j in 0..2 {
                adam(&mut b[j], &mut mb[j], &mut vb[j], c[j], false);
            }
        }
        let got = read(model.a.weight.val());
        for (g, e) in got.iter().zip(&w) {
            assert!((*g as f64 - e).abs() < 1e-5, "weight {g} vs {e}");
        }
        let got_b = to_host::<f32, _>(model.a.bias.as_ref().unwrap().val());
        for (g, e) in got_b.iter().zip(&b) {
            assert!((*g as f64 - e).abs() < 1e-5, "bias {g} vs {e}");
        }

        // Saved and loaded state continues identically.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("optim.safetensors");
        optim.save(&path).unwrap();
        let loaded = AdamW::load(cfg, &path, &device).unwrap();
        assert_eq!(loaded.step, 3);
        assert_eq!(loaded.state.len(), 2);
        let m = |o: &AdamW| to_host::<f32, _>(o.state["a.weight"].m.clone());
        assert_eq!(m(&loaded), m(&optim));
        std::fs::write(&path, b"garbage").unwrap();
        assert!(
            AdamW::load(cfg, &path, &device)
                .unwrap_err()
                .to_string()
                .contains("corrupt")
        );
    }

    #[test]
    fn global_norm_is_the_norm_of_all_gradients_together() {
        let device = Device::flex().autodiff();
        let model = Two {
            a: LinearConfig::new(2, 2).init(&device),
        };
        let x = Tensor::<2>::from_data(TensorData::new(vec![3.0f32, 4.0], [1, 2]), &device);
        let grads = GradientsParams::from_grads(model.a.forward(x).sum().backward(), &model);
        // dW = x^T [1, 1]: entries 3, 3, 4, 4; db = [1, 1]. Norm sqrt(9+9+16+16+1+1).
        let norm = global_grad_norm(&model, &grads);
        assert!((norm - 52f64.sqrt()).abs() < 1e-5, "{norm}");
    }
}
