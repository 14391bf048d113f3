//! AdamW with PyTorch's semantics, and optionally Muon for the blocks' matrices, written out
//! so their state can be saved and their choices seen.
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

/// Hyper-parameters of [`Optimizer`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OptimizerConfig {
    /// First-moment decay.
    pub beta1: f64,
    /// Second-moment decay.
    pub beta2: f64,
    /// Added to the denominator.
    pub eps: f64,
    /// Decoupled weight decay, applied to parameters of rank >= 2 only (AdamW's).
    pub weight_decay: f64,
    /// Muon for the matrices inside the blocks, AdamW for the rest; `None`: AdamW for all.
    pub muon: Option<MuonConfig>,
}

/// Muon (Jordan et al. 2024, "Muon: an optimizer for hidden layers"; the modded-nanogpt
/// speedrun): Nesterov momentum, then the update's orthogonal polar factor by five
/// Newton-Schulz steps, so every direction of a matrix moves at the same rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MuonConfig {
    /// Muon's rate as a multiple of AdamW's at every step (`train.muon_lr / train.lr`), so
    /// both follow one schedule.
    pub lr_ratio: f64,
    /// Momentum of the Nesterov buffer (0.95 in the speedrun).
    pub momentum: f64,
    /// Decoupled decay: the matrix is scaled by `1 - lr * weight_decay` (Muon's scheduled
    /// rate, without the shape scale) before the update; 0 leaves it untouched.
    pub weight_decay: f64,
}

/// Newton-Schulz steps Muon takes.
pub const NEWTON_SCHULZ_STEPS: usize = 5;

/// The quintic's coefficients `(a, b, c)`: `X <- a X + b (X X^T) X + c (X X^T)^2 X` pushes
/// every singular value of a Frobenius-normalised `X` towards 1 in five steps, fast near 0
/// rather than exactly (they end in about [0.7, 1.2]), from the Muon write-up.
pub const NEWTON_SCHULZ_COEFFICIENTS: (f64, f64, f64) = (3.4445, -4.7750, 2.0315);

/// Whether Muon updates the parameter at `name` of rank `rank`: the 2-D weights inside the
/// blocks (Q, K, V, W_O, the MLP's two). Embeddings, the LM head and the gains stay AdamW's,
/// as the Muon write-up prescribes.
pub fn is_muon_param(name: &str, rank: usize) -> bool {
    rank == 2 && name.starts_with("blocks.") && name.ends_with(".weight")
}

/// The orthogonalised update of `g`: about its polar factor `U V^T` (`g = U S V^T`), by
/// [`NEWTON_SCHULZ_STEPS`] steps of the quintic on `g / |g|_F`, on headlab's gemm where the
/// kernels run ([`headlab_kernels::newton_schulz`]).
///
/// # Shapes
/// `[m, n] -> [m, n]`
pub fn newton_schulz(g: Tensor<2>) -> Tensor<2> {
    headlab_kernels::newton_schulz(g, NEWTON_SCHULZ_STEPS, NEWTON_SCHULZ_COEFFICIENTS)
}

/// First and second moments of one parameter, flattened.
#[derive(Debug, Clone)]
struct Moments {
    m: Tensor<1>,
    v: Tensor<1>,
}

/// Optimizer state: the step count, AdamW's moments and Muon's momentum buffers of every
/// parameter by name.
#[derive(Debug, Clone)]
pub struct Optimizer {
    /// Hyper-parameters.
    pub config: OptimizerConfig,
    /// Number of updates made.
    pub step: u64,
    state: HashMap<String, Moments>,
    /// Muon's buffers, flattened.
    momentum: HashMap<String, Tensor<1>>,
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
    optim: &'a mut Optimizer,
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
        let name = self.path.name();
        if let Some(muon) = c.muon
            && is_muon_param(&name, D)
        {
            let (d_in, d_out) = (shape[0], shape[1]);
            // [d_in, d_out] -> [n] and back: buffers are stored flat like the moments.
            let g = grad.reshape([n]).mul_scalar(self.grad_scale);
            let buf = match self.optim.momentum.remove(&name) {
                Some(buf) => buf.mul_scalar(muon.momentum) + g.clone(),
                None => g.clone(),
            };
            let nesterov = g + buf.clone().mul_scalar(muon.momentum);
            self.optim.momentum.insert(name, buf);
            let ortho = newton_schulz(nesterov.reshape([d_in, d_out]));
            // Burn's [d_in, d_out] is PyTorch's [d_out, d_in] transposed: the write-up's
            // sqrt(max(1, rows / cols)) over PyTorch's layout is sqrt(max(1, d_out / d_in)).
            let scale = (d_out as f64 / d_in as f64).max(1.0).sqrt();
            let lr = self.lr * muon.lr_ratio;
            let p = p.reshape([d_in, d_out]);
            let p = if muon.weight_decay > 0.0 {
                p.mul_scalar(1.0 - lr * muon.weight_decay)
            } else {
                p
            };
            let updated = p - ortho.mul_scalar(lr * scale);
            let mut updated = Tensor::from_inner(updated.reshape(shape));
            if require_grad {
                updated = updated.require_grad();
            }
            return Param::from_mapped_value(id, updated, mapper);
        }
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

impl Optimizer {
    /// A fresh optimizer.
    pub fn new(config: OptimizerConfig) -> Self {
        Self {
            config,
            step: 0,
            state: HashMap::new(),
            momentum: HashMap::new(),
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

    /// Writes the step count, moments and Muon buffers as safetensors (`m.<param>`,
    /// `v.<param>`, `mu.<param>`).
    pub fn save(&self, path: &Path) -> Result<(), OptimStateError> {
        let mut buffers: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
        for (name, moments) in &self.state {
            for (prefix, t) in [("m", &moments.m), ("v", &moments.v)] {
                let values = to_host::<f32, _>(t.clone());
                let bytes = values.iter().flat_map(|x| x.to_le_bytes()).collect();
                buffers.push((format!("{prefix}.{name}"), vec![values.len()], bytes));
            }
        }
        for (name, buf) in &self.momentum {
            let values = to_host::<f32, _>(buf.clone());
            let bytes = values.iter().flat_map(|x| x.to_le_bytes()).collect();
            buffers.push((format!("mu.{name}"), vec![values.len()], bytes));
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
        config: OptimizerConfig,
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
        let mut momentum = HashMap::new();
        for name in tensors.names() {
            if let Some(param) = name.strip_prefix("mu.") {
                momentum.insert(param.to_string(), read(name)?);
            } else if let Some(param) = name.strip_prefix("m.") {
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
            momentum,
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
        let cfg = OptimizerConfig {
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.1,
            muon: None,
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
        let mut optim = Optimizer::new(cfg);
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
        let loaded = Optimizer::load(cfg, &path, &device).unwrap();
        assert_eq!(loaded.step, 3);
        assert_eq!(loaded.state.len(), 2);
        let m = |o: &Optimizer| to_host::<f32, _>(o.state["a.weight"].m.clone());
        assert_eq!(m(&loaded), m(&optim));
        std::fs::write(&path, b"garbage").unwrap();
        assert!(
            Optimizer::load(cfg, &path, &device)
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

#[cfg(test)]
mod muon_tests {
    use super::*;
    use burn::nn::{Linear, LinearConfig};
    use burn::tensor::Device;
    use headlab_kernels::with_kernels;

    type Matrix = Vec<Vec<f64>>;

    fn matmul(a: &Matrix, b: &Matrix) -> Matrix {
        let (n, k, m) = (a.len(), b.len(), b[0].len());
        (0..n)
            .map(|i| {
                (0..m)
                    .map(|j| (0..k).map(|l| a[i][l] * b[l][j]).sum())
                    .collect()
            })
            .collect()
    }

    fn transpose(a: &Matrix) -> Matrix {
        (0..a[0].len())
            .map(|j| (0..a.len()).map(|i| a[i][j]).collect())
            .collect()
    }

    /// Eigenvalues and eigenvectors (columns) of a symmetric matrix by cyclic Jacobi rotations.
    fn jacobi_eigen(mut a: Matrix) -> (Vec<f64>, Matrix) {
        let n = a.len();
        let mut v: Matrix = (0..n)
            .map(|i| (0..n).map(|j| f64::from(u8::from(i == j))).collect())
            .collect();
        for _ in 0..100 {
            for p in 0..n {
                for q in p + 1..n {
                    if a[p][q].abs() < 1e-300 {
                        continue;
                    }
                    let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                    let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                    let t = if theta == 0.0 { 1.0 } else { t };
                    let (c, s) = (1.0 / (t * t + 1.0).sqrt(), t / (t * t + 1.0).sqrt());
                    for k in 0..n {
                        let (akp, akq) = (a[k][p], a[k][q]);
                        a[k][p] = c * akp - s * akq;
                        a[k][q] = s * akp + c * akq;
                    }
                    for k in 0..n {
                        let (apk, aqk) = (a[p][k], a[q][k]);
                        a[p][k] = c * apk - s * aqk;
                        a[q][k] = s * apk + c * aqk;
                    }
                    for row in v.iter_mut() {
                        let (vp, vq) = (row[p], row[q]);
                        row[p] = c * vp - s * vq;
                        row[q] = s * vp + c * vq;
                    }
                }
            }
        }
        ((0..n).map(|i| a[i][i]).collect(), v)
    }

    /// `g = U S V^T` from the eigenvectors of `g^T g` (`g` wide or square, full row rank).
    fn svd(g: &Matrix) -> (Matrix, Vec<f64>, Matrix) {
        let (eig, v) = jacobi_eigen(matmul(&transpose(g), g));
        let mut order: Vec<usize> = (0..eig.len()).collect();
        order.sort_by(|&i, &j| eig[j].total_cmp(&eig[i]));
        let rank = g.len().min(g[0].len());
        let v: Matrix = (0..v.len())
            .map(|r| order[..rank].iter().map(|&c| v[r][c]).collect())
            .collect();
        let s: Vec<f64> = order[..rank]
            .iter()
            .map(|&c| eig[c].max(0.0).sqrt())
            .collect();
        let gv = matmul(g, &v);
        let u: Matrix = gv
            .iter()
            .map(|row| row.iter().zip(&s).map(|(x, s)| x / s).collect())
            .collect();
        (u, s, v)
    }

    fn random(rows: usize, cols: usize, seed: u64) -> Matrix {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        (0..rows)
            .map(|_| (0..cols).map(|_| rng.random_range(-1.0..1.0)).collect())
            .collect()
    }

    fn tensor(m: &Matrix, device: &Device) -> Tensor<2> {
        let flat: Vec<f32> = m.iter().flatten().map(|&x| x as f32).collect();
        Tensor::from_data(TensorData::new(flat, [m.len(), m[0].len()]), device)
    }

    /// Newton-Schulz acts on the singular values alone: its result is `U f(S / |g|_F) V^T`
    /// with `f` the quintic applied five times to a number, which the SVD gives independently;
    /// and that is near the polar factor `U V^T`, as close as five steps of the quintic get.
    #[test]
    fn newton_schulz_is_the_quintic_on_the_singular_values_near_the_polar_factor() {
        let device = Device::flex();
        // headlab's host kernel, then Burn's tensor ops (the path of wgpu and flex-burn).
        for (kernels, rows, cols, seed) in [
            (true, 6, 9, 1),
            (true, 9, 6, 2),
            (true, 7, 7, 3),
            (true, 40, 90, 4),
            (false, 6, 9, 1),
            (false, 9, 6, 2),
        ] {
            let g = random(rows, cols, seed);
            let got = with_kernels(kernels, || {
                to_host::<f32, _>(newton_schulz(tensor(&g, &device)))
            });
            // The SVD of the wide side; a tall matrix's is the transpose's.
            let tall = rows > cols;
            let wide = if tall { transpose(&g) } else { g.clone() };
            let (u, s, v) = svd(&wide);
            let frobenius = s.iter().map(|x| x * x).sum::<f64>().sqrt();
            // The Muon write-up's quintic and step count, written out here, not read from
            // the code under test.
            let (a, b, c) = (3.4445, -4.7750, 2.0315);
            let f = |mut x: f64| {
                for _ in 0..5 {
                    x = a * x + b * x.powi(3) + c * x.powi(5);
                }
                x
            };
            let compose = |scale: &dyn Fn(f64) -> f64| {
                let us: Matrix = u
                    .iter()
                    .map(|row| row.iter().zip(&s).map(|(x, s)| x * scale(*s)).collect())
                    .collect();
                let m = matmul(&us, &transpose(&v));
                if tall { transpose(&m) } else { m }
            };
            let expected = compose(&|s| f(s / frobenius));
            let polar = compose(&|_| 1.0);
            let (mut worst, mut off, mut size) = (0f64, 0f64, 0f64);
            for i in 0..rows {
                for j in 0..cols {
                    let x = got[i * cols + j] as f64;
                    worst = worst.max((x - expected[i][j]).abs());
                    off += (x - polar[i][j]).powi(2);
                    size += polar[i][j].powi(2);
                }
            }
            assert!(worst < 1e-4, "kernels {kernels}, {rows}x{cols}: {worst}");
            let relative = (off / size).sqrt();
            assert!(
                relative < 0.3,
                "kernels {kernels}, {rows}x{cols}: {relative} from U V^T"
            );
        }
    }

    #[derive(Module, Debug)]
    struct Net {
        blocks: Vec<Linear>,
        head: Linear,
    }

    /// Three Muon steps on a block matrix against the update written out in f64 (momentum,
    /// Nesterov, the quintic on the singular values, the shape scale, the decoupled decay);
    /// the head beside it stays AdamW's.
    #[test]
    fn muon_updates_block_matrices_and_leaves_the_rest_to_adamw() {
        let device = Device::flex().autodiff();
        let (d_in, d_out) = (3, 5);
        let net = Net {
            blocks: vec![
                LinearConfig::new(d_in, d_out)
                    .with_bias(false)
                    .init(&device),
            ],
            head: LinearConfig::new(d_out, 2).with_bias(false).init(&device),
        };
        let mut model = net;
        let w0 = to_host::<f32, _>(model.blocks[0].weight.val());
        let head0 = to_host::<f32, _>(model.head.weight.val());
        let config = OptimizerConfig {
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.1,
            muon: Some(MuonConfig {
                lr_ratio: 10.0,
                momentum: 0.95,
                weight_decay: 0.5,
            }),
        };
        let mut optim = Optimizer::new(config);
        let (lr, scale) = (0.01, 0.5);
        // loss = sum((X W)^2 * M) / 2 for fixed X [3, d_in] and M [3, d_out]: dW = X^T (M * X W),
        // of full rank (a rank-1 gradient has zero singular values the SVD cannot divide by),
        // and changing with W, so the momentum buffer is not a multiple of the gradient (which
        // the scale-free orthogonalisation could not tell from no momentum at all).
        let xs = [[0.5f64, -1.0, 2.0], [1.5, 0.25, -0.5], [-1.0, 2.0, 1.0]];
        let ms = [
            [1.0f64, -2.0, 0.5, 0.0, 3.0],
            [0.5, 1.0, -1.5, 2.0, 0.0],
            [-1.0, 0.0, 1.0, 0.5, -0.5],
        ];
        let mut w: Matrix = (0..d_in)
            .map(|i| (0..d_out).map(|j| w0[i * d_out + j] as f64).collect())
            .collect();
        let mut buf = vec![vec![0.0; d_out]; d_in];
        for _ in 0..3 {
            let xt = Tensor::<2>::from_data(
                TensorData::new(xs.iter().flatten().map(|&v| v as f32).collect(), [3, d_in]),
                &device,
            );
            let mt = Tensor::<2>::from_data(
                TensorData::new(ms.iter().flatten().map(|&v| v as f32).collect(), [3, d_out]),
                &device,
            );
            let hidden = model.blocks[0].forward(xt);
            let loss = hidden.clone().square().mul(mt).sum().mul_scalar(0.5)
                + model.head.forward(hidden).sum() * 0.0;
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            model = optim.step(model, &grads, lr, scale);

            // H = X W with W before this step's update.
            let h: Vec<Vec<f64>> = (0..3)
                .map(|r| {
                    (0..d_out)
                        .map(|j| (0..d_in).map(|i| xs[r][i] * w[i][j]).sum())
                        .collect()
                })
                .collect();
            let g: Matrix = (0..d_in)
                .map(|i| {
                    (0..d_out)
                        .map(|j| scale * (0..3).map(|r| xs[r][i] * ms[r][j] * h[r][j]).sum::<f64>())
                        .collect()
                })
                .collect();
            let mut nesterov = g.clone();
            for i in 0..d_in {
                for j in 0..d_out {
                    buf[i][j] = 0.95 * buf[i][j] + g[i][j];
                    nesterov[i][j] = g[i][j] + 0.95 * buf[i][j];
                }
            }
            // Burn's [d_in, d_out] is wide here: the SVD of it directly.
            let (u, s, v) = svd(&nesterov);
            let frobenius = s.iter().map(|x| x * x).sum::<f64>().sqrt();
            let (a, b, cc) = (3.4445, -4.7750, 2.0315);
            let f = |mut x: f64| {
                for _ in 0..5 {
                    x = a * x + b * x.powi(3) + cc * x.powi(5);
                }
                x
            };
            let us: Matrix = u
                .iter()
                .map(|row| {
                    row.iter()
                        .zip(&s)
                        .map(|(x, s)| x * f(s / frobenius))
                        .collect()
                })
                .collect();
            let ortho = matmul(&us, &transpose(&v));
            // Decoupled decay at Muon's rate (lr * 10), then the update at that rate times
            // the shape scale.
            let decay = 1.0 - lr * 10.0 * 0.5;
            let step = lr * 10.0 * (d_out as f64 / d_in as f64).sqrt();
            for i in 0..d_in {
                for j in 0..d_out {
                    w[i][j] = decay * w[i][j] - step * ortho[i][j];
                }
            }
        }
        let got = to_host::<f32, _>(model.blocks[0].weight.val());
        for i in 0..d_in {
            for j in 0..d_out {
                let e = w[i][j];
                let g = got[i * d_out + j] as f64;
                assert!((g - e).abs() < 1e-5, "W[{i}][{j}]: {g} vs {e}");
            }
        }
        // The head had a zero gradient: AdamW only decayed it, three times.
        let head = to_host::<f32, _>(model.head.weight.val());
        for (h, h0) in head.iter().zip(&head0) {
            let e = *h0 as f64 * (1.0 - lr * 0.1).powi(3);
            assert!((*h as f64 - e).abs() < 1e-6, "head {h} vs {e}");
        }
        assert!(is_muon_param("blocks.3.mlp.c_fc.weight", 2));
        assert!(!is_muon_param("blocks.3.ln_1.gamma", 1));
        assert!(!is_muon_param("wte.weight", 2));

        // The buffers survive a save and load.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("optim.safetensors");
        optim.save(&path).unwrap();
        let loaded = Optimizer::load(config, &path, &device).unwrap();
        let mu = |o: &Optimizer| to_host::<f32, _>(o.momentum["blocks.0.weight"].clone());
        assert_eq!(mu(&loaded), mu(&optim));
    }
}
