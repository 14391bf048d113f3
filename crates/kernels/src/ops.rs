//! The backend extension: the host kernels behind Burn's dispatch, and the autodiff nodes that
//! call their hand-written backwards.

// `ndarray` is deprecated upstream; headlab keeps it as a second CPU backend.
#![allow(deprecated)]

use std::sync::Arc;

#[cfg(feature = "ndarray")]
use burn::backend::NdArray;
use burn::backend::autodiff::{
    Autodiff, NodeId,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::flex::{FlexTensor, Layout};
#[cfg(feature = "ndarray")]
use burn::backend::ndarray::NdArrayTensor;
#[cfg(feature = "ndarray")]
use burn::backend::ops::FloatTensorOps;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Flex, TensorMetadata, backend_extension};
#[cfg(feature = "ndarray")]
use burn::tensor::TensorData;
use burn::tensor::{Bytes, DType, Shape};

use crate::adamw::AdamWStep;
use crate::dropout::Mask;
use crate::flash::{self, Dims, HeadLayout};
use crate::rotary::{self, Rotary};
use crate::{Precision, gelu, layer_norm, linear};

/// headlab's ops, each one node of Burn's graph with a hand-written backward. Listed
/// backends only: the wrappers in the crate root check [`crate::runs_on`] first.
#[cfg_attr(feature = "ndarray", backend_extension(Flex, NdArray, Autodiff))]
#[cfg_attr(not(feature = "ndarray"), backend_extension(Flex, Autodiff))]
pub trait KernelBackend: Backend {
    /// `softmax(q k^T / sqrt(d_k) + causal mask) v` for `q [b, h, t_q, d_k]`,
    /// `k, v [b, h, t_k, d_k]`, or `[b, t, h, d_k]` each with `heads_last`; with `drop`, the
    /// probabilities go through that dropout mask before `v` (`flash`'s module docs).
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: bool,
        heads_last: bool,
        drop: Option<Mask>,
    ) -> FloatTensor<Self>;

    /// Exact (erf) GELU, elementwise.
    fn gelu(x: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `x` with the elements `mask` drops zeroed and the rest scaled, elementwise.
    fn dropout(x: FloatTensor<Self>, mask: Mask) -> FloatTensor<Self>;

    /// LayerNorm over the last dimension with scale `gamma` and shift `beta`, both `[d]`.
    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self>;

    /// `x W` for `x [..., d_in]`, `W [d_in, d_out]`.
    fn linear(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `x W + b` for `x [..., d_in]`, `W [d_in, d_out]`, `b [d_out]`.
    fn linear_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self>;

    /// QK-norm and/or RoPE on every head of `x [b, t, h, d_k]` (the projections' layout).
    fn rotary(x: FloatTensor<Self>, spec: Rotary) -> FloatTensor<Self>;

    /// One AdamW update of a parameter from its gradient and moments, all `[n]`: the
    /// parameter and moments after it. Not differentiable (optimizers work on inner tensors).
    fn adamw(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        step: AdamWStep,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>);
}

/// A float tensor's values on the host, contiguous and in logical order: flex's own buffer
/// where it already is (no copy), a copy otherwise.
#[derive(Clone, Debug)]
pub enum HostData {
    /// A contiguous f32 flex tensor, read in place.
    Flex(FlexTensor),
    /// Values copied out of the backend.
    Owned(Arc<Vec<f32>>),
}

impl HostData {
    fn as_slice(&self) -> &[f32] {
        match self {
            HostData::Flex(t) => t.as_slice::<f32>().expect("made contiguous f32 by to_host"),
            HostData::Owned(v) => v,
        }
    }
}

/// Moving tensors between a backend and host memory, without copies where the backend allows.
pub trait HostAccess: Backend {
    /// The tensor's values, contiguous.
    fn to_host(t: FloatTensor<Self>) -> HostData;
    /// A tensor of `shape` on `device` holding `data`.
    fn from_host(data: Vec<f32>, shape: Shape, device: &DeviceOf<Self>) -> FloatTensor<Self>;
}

type DeviceOf<B> = <FloatTensor<B> as TensorMetadata>::Device;

impl HostAccess for Flex {
    fn to_host(t: FlexTensor) -> HostData {
        assert_eq!(
            t.dtype(),
            DType::F32,
            "headlab's kernels run on f32 (see `runs_on`)"
        );
        if t.as_slice::<f32>().is_some() {
            HostData::Flex(t)
        } else {
            HostData::Flex(t.to_contiguous())
        }
    }

    fn from_host(data: Vec<f32>, shape: Shape, _: &DeviceOf<Self>) -> FlexTensor {
        FlexTensor::new(
            Bytes::from_elems(data),
            Layout::contiguous(shape),
            DType::F32,
        )
    }
}

#[cfg(feature = "ndarray")]
impl HostAccess for NdArray {
    fn to_host(t: FloatTensor<Self>) -> HostData {
        let NdArrayTensor::F32(storage) = t else {
            panic!("headlab's kernels run on f32 (see `runs_on`)");
        };
        // A memcpy where the array is in standard order: ndarray's `into_data` walks any
        // array element by element through its dynamic-rank iterator, ~20 ns each.
        let view = storage.view();
        let values = match view.as_slice() {
            Some(values) => values.to_vec(),
            None => view.iter().copied().collect(),
        };
        HostData::Owned(Arc::new(values))
    }

    fn from_host(data: Vec<f32>, shape: Shape, device: &DeviceOf<Self>) -> FloatTensor<Self> {
        Self::float_from_data(TensorData::new(data, shape), device)
    }
}

/// The plain (no autodiff) backends: run the forward kernels, keep nothing.
macro_rules! host_backend {
    ($backend:ty) => {
        impl KernelBackend for $backend {
            fn flash_attention(
                q: FloatTensor<Self>,
                k: FloatTensor<Self>,
                v: FloatTensor<Self>,
                causal: bool,
                heads_last: bool,
                drop: Option<Mask>,
            ) -> FloatTensor<Self> {
                attention_forward::<Self>(q, k, v, causal, heads_last, drop).0
            }

            fn gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
                gelu_forward::<Self>(x)
            }

            fn dropout(x: FloatTensor<Self>, mask: Mask) -> FloatTensor<Self> {
                dropout_forward::<Self>(x, mask)
            }

            fn layer_norm(
                x: FloatTensor<Self>,
                gamma: FloatTensor<Self>,
                beta: FloatTensor<Self>,
                epsilon: f64,
            ) -> FloatTensor<Self> {
                layer_norm_forward::<Self>(x, gamma, beta, epsilon).0
            }

            fn linear(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
                linear_forward::<Self>(x, weight, None).0
            }

            fn linear_bias(
                x: FloatTensor<Self>,
                weight: FloatTensor<Self>,
                bias: FloatTensor<Self>,
            ) -> FloatTensor<Self> {
                linear_forward::<Self>(x, weight, Some(bias)).0
            }

            fn rotary(x: FloatTensor<Self>, spec: Rotary) -> FloatTensor<Self> {
                rotary_forward::<Self>(x, spec, false).0
            }

            fn adamw(
                param: FloatTensor<Self>,
                grad: FloatTensor<Self>,
                m: FloatTensor<Self>,
                v: FloatTensor<Self>,
                step: AdamWStep,
            ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
                adamw_host::<Self>(param, grad, m, v, step)
            }
        }
    };
}

host_backend!(Flex);
#[cfg(feature = "ndarray")]
host_backend!(NdArray);

impl<B: HostAccess, C: CheckpointStrategy> KernelBackend for Autodiff<B, C> {
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: bool,
        heads_last: bool,
        drop: Option<Mask>,
    ) -> FloatTensor<Self> {
        let prep = FlashBackward.prepare::<C>([q.node(), k.node(), v.node()]);
        let (q, k, v) = (q.into_primitive(), k.into_primitive(), v.into_primitive());
        match prep.compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (out, saved) = attention_forward::<B>(q, k, v, causal, heads_last, drop);
                prep.finish(Arc::new(saved), out)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(attention_forward::<B>(q, k, v, causal, heads_last, drop).0)
            }
        }
    }

    fn gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        let prep = GeluBackward.prepare::<C>([x.node()]);
        let x = x.into_primitive();
        match prep.compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (y, saved) = gelu_forward_tracked::<B>(x);
                prep.finish(Arc::new(saved), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(gelu_forward::<B>(x)),
        }
    }

    fn dropout(x: FloatTensor<Self>, mask: Mask) -> FloatTensor<Self> {
        let prep = DropoutBackward.prepare::<C>([x.node()]);
        let x = x.into_primitive();
        match prep.compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let saved = DropoutSaved {
                    mask,
                    shape: x.shape(),
                    device: x.device(),
                };
                prep.finish(saved, dropout_forward::<B>(x, mask))
            }
            OpsKind::UnTracked(prep) => prep.finish(dropout_forward::<B>(x, mask)),
        }
    }

    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        let prep = LayerNormBackward.prepare::<C>([x.node(), gamma.node(), beta.node()]);
        let (x, gamma, beta) = (
            x.into_primitive(),
            gamma.into_primitive(),
            beta.into_primitive(),
        );
        match prep.compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (y, saved) = layer_norm_forward::<B>(x, gamma, beta, epsilon);
                prep.finish(Arc::new(saved), y)
            }
            OpsKind::UnTracked(prep) => {
                prep.finish(layer_norm_forward::<B>(x, gamma, beta, epsilon).0)
            }
        }
    }

    fn linear(x: FloatTensor<Self>, weight: FloatTensor<Self>) -> FloatTensor<Self> {
        let prep = LinearBackward.prepare::<C>([x.node(), weight.node()]);
        let (x, weight) = (x.into_primitive(), weight.into_primitive());
        match prep.compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (y, saved) = linear_forward::<B>(x, weight, None);
                prep.finish(Arc::new(saved), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(linear_forward::<B>(x, weight, None).0),
        }
    }

    fn linear_bias(
        x: FloatTensor<Self>,
        weight: FloatTensor<Self>,
        bias: FloatTensor<Self>,
    ) -> FloatTensor<Self> {
        let prep = LinearBackward.prepare::<C>([x.node(), weight.node(), bias.node()]);
        let (x, weight, bias) = (
            x.into_primitive(),
            weight.into_primitive(),
            bias.into_primitive(),
        );
        match prep.compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (y, saved) = linear_forward::<B>(x, weight, Some(bias));
                prep.finish(Arc::new(saved), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(linear_forward::<B>(x, weight, Some(bias)).0),
        }
    }

    fn rotary(x: FloatTensor<Self>, spec: Rotary) -> FloatTensor<Self> {
        let prep = RotaryBackward.prepare::<C>([x.node()]);
        let x = x.into_primitive();
        match prep.compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (y, saved) = rotary_forward::<B>(x, spec, true);
                prep.finish(Arc::new(saved), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(rotary_forward::<B>(x, spec, false).0),
        }
    }

    fn adamw(
        param: FloatTensor<Self>,
        grad: FloatTensor<Self>,
        m: FloatTensor<Self>,
        v: FloatTensor<Self>,
        step: AdamWStep,
    ) -> (FloatTensor<Self>, FloatTensor<Self>, FloatTensor<Self>) {
        // No graph: the results are constants, as optimizer state is.
        let (param, m, v) = adamw_host::<B>(
            param.into_primitive(),
            grad.into_primitive(),
            m.into_primitive(),
            v.into_primitive(),
            step,
        );
        (
            FloatTensor::<Self>::new(param),
            FloatTensor::<Self>::new(m),
            FloatTensor::<Self>::new(v),
        )
    }
}

/// Registers `grad` (host values of `shape`) for the tensor `node`, if it wants one; `grad`
/// is only computed then.
fn register<B: HostAccess>(
    grads: &mut Gradients,
    node: Option<NodeId>,
    grad: impl FnOnce() -> Vec<f32>,
    shape: &Shape,
    device: &DeviceOf<B>,
) {
    if let Some(id) = node {
        grads.register::<B>(id, B::from_host(grad(), shape.clone(), device));
    }
}

// ---------------------------------------------------------------------------------------------
// Attention

/// What the attention backward needs: the inputs, the output and each row's log-sum-exp.
#[derive(Debug)]
struct AttentionSaved<D> {
    q: HostData,
    k: HostData,
    v: HostData,
    out: HostData,
    lse: Vec<f32>,
    q_shape: Shape,
    k_shape: Shape,
    dims: Dims,
    layout: HeadLayout,
    scale: f32,
    causal: bool,
    drop: Option<Mask>,
    device: D,
}

#[derive(Debug)]
struct FlashBackward;

impl<B: HostAccess> Backward<B, 3> for FlashBackward {
    type State = Arc<AttentionSaved<DeviceOf<B>>>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_q, node_k, node_v] = ops.parents.map(|n| n.map(|n| n.id));
        let d_out = B::to_host(grads.consume::<B>(&ops.node));
        let s = ops.state;
        let (dq, dk, dv) = flash::backward(
            s.q.as_slice(),
            s.k.as_slice(),
            s.v.as_slice(),
            s.out.as_slice(),
            &s.lse,
            d_out.as_slice(),
            s.dims,
            s.layout,
            s.scale,
            s.causal,
            s.drop,
        );
        register::<B>(grads, node_q, || dq, &s.q_shape, &s.device);
        register::<B>(grads, node_k, || dk, &s.k_shape, &s.device);
        register::<B>(grads, node_v, || dv, &s.k_shape, &s.device);
    }
}

/// Runs the attention kernel on `B`'s tensors; returns the output and what the backward needs.
fn attention_forward<B: HostAccess>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    causal: bool,
    heads_last: bool,
    drop: Option<Mask>,
) -> (FloatTensor<B>, AttentionSaved<DeviceOf<B>>) {
    let (q_shape, k_shape, device) = (q.shape(), k.shape(), q.device());
    let ([b, d1, d2, d_k], t_k) = (q_shape.dims(), k_shape[if heads_last { 1 } else { 2 }]);
    let (layout, heads, t_q) = if heads_last {
        (HeadLayout::HeadsLast, d2, d1)
    } else {
        (HeadLayout::HeadsFirst, d1, d2)
    };
    let dims = Dims {
        batch: b,
        heads,
        t_q,
        t_k,
        d_k,
    };
    let scale = if crate::toggle::mutated(crate::Mutation::AttentionScale) {
        1.0 / d_k as f32
    } else {
        1.0 / (d_k as f32).sqrt()
    };
    let (q, k, v) = (B::to_host(q), B::to_host(k), B::to_host(v));
    let (out, lse) = flash::forward(
        q.as_slice(),
        k.as_slice(),
        v.as_slice(),
        dims,
        layout,
        scale,
        causal,
        drop,
    );
    let out = B::from_host(out, q_shape.clone(), &device);
    let saved_out = B::to_host(out.clone());
    let saved = AttentionSaved {
        q,
        k,
        v,
        out: saved_out,
        lse,
        q_shape,
        k_shape,
        dims,
        layout,
        scale,
        causal,
        drop,
        device,
    };
    (out, saved)
}

// ---------------------------------------------------------------------------------------------
// Dropout

/// The backward needs only the mask's seed and settings: it computes the mask again.
#[derive(Debug, Clone)]
struct DropoutSaved<D> {
    mask: Mask,
    shape: Shape,
    device: D,
}

#[derive(Debug)]
struct DropoutBackward;

impl<B: HostAccess> Backward<B, 1> for DropoutBackward {
    type State = DropoutSaved<DeviceOf<B>>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x] = ops.parents.map(|n| n.map(|n| n.id));
        let d_y = B::to_host(grads.consume::<B>(&ops.node));
        let s = ops.state;
        register::<B>(
            grads,
            node_x,
            || s.mask.apply(d_y.as_slice()),
            &s.shape,
            &s.device,
        );
    }
}

fn dropout_forward<B: HostAccess>(x: FloatTensor<B>, mask: Mask) -> FloatTensor<B> {
    let (shape, device) = (x.shape(), x.device());
    let x = B::to_host(x);
    B::from_host(mask.apply(x.as_slice()), shape, &device)
}

// ---------------------------------------------------------------------------------------------
// GELU

/// GELU's derivative at its input, for the backward.
#[derive(Debug)]
struct GeluSaved<D> {
    derivative: Vec<f32>,
    shape: Shape,
    device: D,
}

#[derive(Debug)]
struct GeluBackward;

impl<B: HostAccess> Backward<B, 1> for GeluBackward {
    type State = Arc<GeluSaved<DeviceOf<B>>>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x] = ops.parents.map(|n| n.map(|n| n.id));
        let d_y = B::to_host(grads.consume::<B>(&ops.node));
        let s = ops.state;
        let dx = || gelu::gelu_backward(&s.derivative, d_y.as_slice());
        register::<B>(grads, node_x, dx, &s.shape, &s.device);
    }
}

fn gelu_forward<B: HostAccess>(x: FloatTensor<B>) -> FloatTensor<B> {
    let (shape, device) = (x.shape(), x.device());
    let x = B::to_host(x);
    B::from_host(gelu::gelu(x.as_slice()), shape, &device)
}

fn gelu_forward_tracked<B: HostAccess>(
    x: FloatTensor<B>,
) -> (FloatTensor<B>, GeluSaved<DeviceOf<B>>) {
    let (shape, device) = (x.shape(), x.device());
    let x = B::to_host(x);
    let (y, derivative) = gelu::gelu_with_derivative(x.as_slice());
    let y = B::from_host(y, shape.clone(), &device);
    let saved = GeluSaved {
        derivative,
        shape,
        device,
    };
    (y, saved)
}

// ---------------------------------------------------------------------------------------------
// LayerNorm

/// LayerNorm's normalised input and per-row `1 / std`, and `gamma`.
#[derive(Debug)]
struct LayerNormSaved<D> {
    x_hat: Vec<f32>,
    rstd: Vec<f32>,
    gamma: HostData,
    shape: Shape,
    param_shape: Shape,
    device: D,
}

#[derive(Debug)]
struct LayerNormBackward;

impl<B: HostAccess> Backward<B, 3> for LayerNormBackward {
    type State = Arc<LayerNormSaved<DeviceOf<B>>>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents.map(|n| n.map(|n| n.id));
        let d_y = B::to_host(grads.consume::<B>(&ops.node));
        let s = ops.state;
        let (dx, dgamma, dbeta) =
            layer_norm::layer_norm_backward(d_y.as_slice(), &s.x_hat, &s.rstd, s.gamma.as_slice());
        register::<B>(grads, node_x, || dx, &s.shape, &s.device);
        register::<B>(grads, node_gamma, || dgamma, &s.param_shape, &s.device);
        register::<B>(grads, node_beta, || dbeta, &s.param_shape, &s.device);
    }
}

fn layer_norm_forward<B: HostAccess>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    epsilon: f64,
) -> (FloatTensor<B>, LayerNormSaved<DeviceOf<B>>) {
    let (shape, param_shape, device) = (x.shape(), gamma.shape(), x.device());
    let (x, gamma, beta) = (B::to_host(x), B::to_host(gamma), B::to_host(beta));
    let (y, x_hat, rstd) = layer_norm::layer_norm(
        x.as_slice(),
        gamma.as_slice(),
        beta.as_slice(),
        epsilon as f32,
    );
    let y = B::from_host(y, shape.clone(), &device);
    let saved = LayerNormSaved {
        x_hat,
        rstd,
        gamma,
        shape,
        param_shape,
        device,
    };
    (y, saved)
}

// ---------------------------------------------------------------------------------------------
// Linear

/// The linear layer's input and weight, for the gradients of each other.
#[derive(Debug)]
struct LinearSaved<D> {
    x: HostData,
    weight: HostData,
    x_shape: Shape,
    weight_shape: Shape,
    device: D,
    /// The forward's precision, which the backward's products take too.
    precision: Precision,
}

#[derive(Debug)]
struct LinearBackward;

impl<B: HostAccess, const N: usize> Backward<B, N> for LinearBackward {
    type State = Arc<LinearSaved<DeviceOf<B>>>;

    fn backward(self, ops: Ops<Self::State, N>, grads: &mut Gradients, _: &mut Checkpointer) {
        let mut parents = ops.parents.into_iter().map(|n| n.map(|n| n.id));
        let (node_x, node_w, node_b) = (
            parents.next().flatten(),
            parents.next().flatten(),
            parents.next().flatten(),
        );
        let d_y = B::to_host(grads.consume::<B>(&ops.node));
        let s = ops.state;
        let [d_in, d_out] = s.weight_shape.dims();
        let (x, w, d_y) = (s.x.as_slice(), s.weight.as_slice(), d_y.as_slice());
        let dx = || linear::linear_x_backward(d_y, w, d_in, d_out, s.precision);
        register::<B>(grads, node_x, dx, &s.x_shape, &s.device);
        let dw = || linear::linear_weight_backward(x, d_y, d_in, d_out, s.precision);
        register::<B>(grads, node_w, dw, &s.weight_shape, &s.device);
        let db = || linear::column_sums(d_y, d_out);
        register::<B>(grads, node_b, db, &Shape::new([d_out]), &s.device);
    }
}

fn linear_forward<B: HostAccess>(
    x: FloatTensor<B>,
    weight: FloatTensor<B>,
    bias: Option<FloatTensor<B>>,
) -> (FloatTensor<B>, LinearSaved<DeviceOf<B>>) {
    let (x_shape, weight_shape, device) = (x.shape(), weight.shape(), x.device());
    let [d_in, d_out] = weight_shape.dims();
    let (x, weight) = (B::to_host(x), B::to_host(weight));
    let bias = bias.map(B::to_host);
    let precision = crate::precision();
    let y = linear::linear(
        x.as_slice(),
        weight.as_slice(),
        bias.as_ref().map(HostData::as_slice),
        d_in,
        d_out,
        precision,
    );
    let mut y_dims: Vec<usize> = (0..x_shape.num_dims()).map(|i| x_shape[i]).collect();
    *y_dims.last_mut().expect("x has at least one dimension") = d_out;
    let y = B::from_host(y, Shape::from(y_dims), &device);
    let saved = LinearSaved {
        x,
        weight,
        x_shape,
        weight_shape,
        device,
        precision,
    };
    (y, saved)
}

// ---------------------------------------------------------------------------------------------
// QK-norm and RoPE

/// The forward's normalised input (with the norm), the shape and the settings.
#[derive(Debug)]
struct RotarySaved<D> {
    saved: rotary::Saved,
    dims: rotary::Dims,
    spec: Rotary,
    shape: Shape,
    device: D,
}

#[derive(Debug)]
struct RotaryBackward;

impl<B: HostAccess> Backward<B, 1> for RotaryBackward {
    type State = Arc<RotarySaved<DeviceOf<B>>>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x] = ops.parents.map(|n| n.map(|n| n.id));
        let d_y = B::to_host(grads.consume::<B>(&ops.node));
        let s = ops.state;
        let dx = || rotary::backward(d_y.as_slice(), &s.saved, s.dims, s.spec);
        register::<B>(grads, node_x, dx, &s.shape, &s.device);
    }
}

/// Runs the kernel on `B`'s tensor; returns the output and, with `save`, what the backward
/// needs.
fn rotary_forward<B: HostAccess>(
    x: FloatTensor<B>,
    spec: Rotary,
    save: bool,
) -> (FloatTensor<B>, RotarySaved<DeviceOf<B>>) {
    let (shape, device) = (x.shape(), x.device());
    let [batch, t, heads, d_k] = shape.dims();
    let dims = rotary::Dims {
        batch,
        t,
        heads,
        d_k,
    };
    let x = B::to_host(x);
    let (y, saved) = rotary::forward(x.as_slice(), dims, spec, save);
    let y = B::from_host(y, shape.clone(), &device);
    let saved = RotarySaved {
        saved,
        dims,
        spec,
        shape,
        device,
    };
    (y, saved)
}

// ---------------------------------------------------------------------------------------------
// AdamW

fn adamw_host<B: HostAccess>(
    param: FloatTensor<B>,
    grad: FloatTensor<B>,
    m: FloatTensor<B>,
    v: FloatTensor<B>,
    step: AdamWStep,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let (shape, device) = (param.shape(), param.device());
    let [param, grad, m, v] = [param, grad, m, v].map(B::to_host);
    let (param, m, v) = crate::adamw::adamw(
        param.as_slice(),
        grad.as_slice(),
        m.as_slice(),
        v.as_slice(),
        &step,
    );
    (
        B::from_host(param, shape.clone(), &device),
        B::from_host(m, shape.clone(), &device),
        B::from_host(v, shape, &device),
    )
}
