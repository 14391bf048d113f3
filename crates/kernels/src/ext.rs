//! The backend extension: [`cpu`](crate::cpu)'s kernels behind Burn's dispatch, and the
//! autodiff node that calls the hand-written backward.

// `ndarray` is deprecated upstream; headlab keeps it as a second CPU backend.
#![allow(deprecated)]

use std::sync::Arc;

use burn::backend::autodiff::{
    Autodiff,
    checkpoint::{base::Checkpointer, strategy::CheckpointStrategy},
    grads::Gradients,
    ops::{Backward, Ops, OpsKind},
};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Backend, Flex, NdArray, TensorMetadata, backend_extension};
use burn::tensor::{Shape, TensorData, read_sync};

use crate::cpu::{self, Dims};
use crate::pointwise;

/// headlab's ops, each one node of Burn's graph with a hand-written backward. Listed
/// backends only: the wrappers in the crate root check [`crate::supports`] first.
#[backend_extension(Flex, NdArray, Autodiff)]
pub trait KernelBackend: Backend {
    /// `softmax(q k^T / sqrt(d_k) + causal mask) v` for `q [b, h, t_q, d_k]`,
    /// `k, v [b, h, t_k, d_k]`.
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: bool,
    ) -> FloatTensor<Self>;

    /// Exact (erf) GELU, elementwise.
    fn gelu(x: FloatTensor<Self>) -> FloatTensor<Self>;

    /// LayerNorm over the last dimension with scale `gamma` and shift `beta`, both `[d]`.
    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self>;
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
            ) -> FloatTensor<Self> {
                attention_forward::<Self>(q, k, v, causal).0
            }

            fn gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
                gelu_forward::<Self>(x).0
            }

            fn layer_norm(
                x: FloatTensor<Self>,
                gamma: FloatTensor<Self>,
                beta: FloatTensor<Self>,
                epsilon: f64,
            ) -> FloatTensor<Self> {
                layer_norm_forward::<Self>(x, gamma, beta, epsilon).0
            }
        }
    };
}

host_backend!(Flex);
host_backend!(NdArray);

impl<B: Backend, C: CheckpointStrategy> KernelBackend for Autodiff<B, C> {
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: bool,
    ) -> FloatTensor<Self> {
        match FlashBackward
            .prepare::<C>([q.node(), k.node(), v.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (out, saved) = attention_forward::<B>(
                    q.into_primitive(),
                    k.into_primitive(),
                    v.into_primitive(),
                    causal,
                );
                prep.finish(Arc::new(saved), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(
                attention_forward::<B>(
                    q.into_primitive(),
                    k.into_primitive(),
                    v.into_primitive(),
                    causal,
                )
                .0,
            ),
        }
    }
    fn gelu(x: FloatTensor<Self>) -> FloatTensor<Self> {
        match GeluBackward
            .prepare::<C>([x.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (y, saved) = gelu_forward::<B>(x.into_primitive());
                prep.finish(Arc::new(saved), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(gelu_forward::<B>(x.into_primitive()).0),
        }
    }

    fn layer_norm(
        x: FloatTensor<Self>,
        gamma: FloatTensor<Self>,
        beta: FloatTensor<Self>,
        epsilon: f64,
    ) -> FloatTensor<Self> {
        match LayerNormBackward
            .prepare::<C>([x.node(), gamma.node(), beta.node()])
            .compute_bound()
            .stateful()
        {
            OpsKind::Tracked(prep) => {
                let (y, saved) = layer_norm_forward::<B>(
                    x.into_primitive(),
                    gamma.into_primitive(),
                    beta.into_primitive(),
                    epsilon,
                );
                prep.finish(Arc::new(saved), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(
                layer_norm_forward::<B>(
                    x.into_primitive(),
                    gamma.into_primitive(),
                    beta.into_primitive(),
                    epsilon,
                )
                .0,
            ),
        }
    }
}

type DeviceOf<B> = <FloatTensor<B> as TensorMetadata>::Device;

/// What the backward needs, on the host: the inputs, the output and each row's log-sum-exp.
#[derive(Debug)]
struct Saved<D> {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    out: Vec<f32>,
    lse: Vec<f32>,
    q_shape: Shape,
    k_shape: Shape,
    dims: Dims,
    scale: f32,
    causal: bool,
    device: D,
}

#[derive(Debug)]
struct FlashBackward;

impl<B: Backend> Backward<B, 3> for FlashBackward {
    type State = Arc<Saved<DeviceOf<B>>>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_q, node_k, node_v] = ops.parents;
        let d_out = host::<B>(grads.consume::<B>(&ops.node));
        let s = ops.state;
        let (dq, dk, dv) = cpu::backward(
            &s.q, &s.k, &s.v, &s.out, &s.lse, &d_out, s.dims, s.scale, s.causal,
        );
        for (node, grad, shape) in [
            (node_q, dq, &s.q_shape),
            (node_k, dk, &s.k_shape),
            (node_v, dv, &s.k_shape),
        ] {
            if let Some(node) = node {
                grads.register::<B>(node.id, device_tensor::<B>(grad, shape, &s.device));
            }
        }
    }
}

/// Runs the attention kernel on `B`'s tensors; returns the output and what the backward needs.
fn attention_forward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    causal: bool,
) -> (
    FloatTensor<B>,
    Saved<<FloatTensor<B> as TensorMetadata>::Device>,
) {
    let (q_shape, k_shape, device) = (q.shape(), k.shape(), q.device());
    let [b, h, t_q, d_k] = q_shape.dims();
    let t_k = k_shape.dims::<4>()[2];
    let dims = Dims {
        heads: b * h,
        t_q,
        t_k,
        d_k,
    };
    let scale = 1.0 / (d_k as f32).sqrt();
    let (q, k, v) = (host::<B>(q), host::<B>(k), host::<B>(v));
    let (out, lse) = cpu::forward(&q, &k, &v, dims, scale, causal);
    let out_tensor = device_tensor::<B>(out.clone(), &q_shape, &device);
    let saved = Saved {
        q,
        k,
        v,
        out,
        lse,
        q_shape,
        k_shape,
        dims,
        scale,
        causal,
        device,
    };
    (out_tensor, saved)
}

/// A CPU backend's tensor as contiguous f32 in logical order (a copy for strided views).
fn host<B: Backend>(t: FloatTensor<B>) -> Vec<f32> {
    read_sync(B::float_into_data(t))
        .expect("a CPU backend reads its own tensor")
        .try_into_vec::<f32>()
        .expect("flash attention runs on f32 tensors (checked by `supports`)")
}

fn device_tensor<B: Backend>(
    data: Vec<f32>,
    shape: &Shape,
    device: &DeviceOf<B>,
) -> FloatTensor<B> {
    B::float_from_data(TensorData::new(data, shape.clone()), device)
}

/// GELU's input, for its derivative.
#[derive(Debug)]
struct GeluSaved<D> {
    x: Vec<f32>,
    shape: Shape,
    device: D,
}

#[derive(Debug)]
struct GeluBackward;

impl<B: Backend> Backward<B, 1> for GeluBackward {
    type State = Arc<GeluSaved<DeviceOf<B>>>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x] = ops.parents;
        let d_y = host::<B>(grads.consume::<B>(&ops.node));
        if let Some(node) = node_x {
            let s = ops.state;
            let dx = pointwise::gelu_backward(&s.x, d_y);
            grads.register::<B>(node.id, device_tensor::<B>(dx, &s.shape, &s.device));
        }
    }
}

fn gelu_forward<B: Backend>(x: FloatTensor<B>) -> (FloatTensor<B>, GeluSaved<DeviceOf<B>>) {
    let (shape, device) = (x.shape(), x.device());
    let x = host::<B>(x);
    let y = device_tensor::<B>(pointwise::gelu(&x), &shape, &device);
    (y, GeluSaved { x, shape, device })
}

/// LayerNorm's normalised input and per-row `1 / std`, and `gamma`.
#[derive(Debug)]
struct LayerNormSaved<D> {
    x_hat: Vec<f32>,
    rstd: Vec<f32>,
    gamma: Vec<f32>,
    shape: Shape,
    param_shape: Shape,
    device: D,
}

#[derive(Debug)]
struct LayerNormBackward;

impl<B: Backend> Backward<B, 3> for LayerNormBackward {
    type State = Arc<LayerNormSaved<DeviceOf<B>>>;

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _: &mut Checkpointer) {
        let [node_x, node_gamma, node_beta] = ops.parents;
        let d_y = host::<B>(grads.consume::<B>(&ops.node));
        let s = ops.state;
        let (dx, dgamma, dbeta) = pointwise::layer_norm_backward(&d_y, &s.x_hat, &s.rstd, &s.gamma);
        for (node, grad, shape) in [
            (node_x, dx, &s.shape),
            (node_gamma, dgamma, &s.param_shape),
            (node_beta, dbeta, &s.param_shape),
        ] {
            if let Some(node) = node {
                grads.register::<B>(node.id, device_tensor::<B>(grad, shape, &s.device));
            }
        }
    }
}

fn layer_norm_forward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    epsilon: f64,
) -> (FloatTensor<B>, LayerNormSaved<DeviceOf<B>>) {
    let (shape, param_shape, device) = (x.shape(), gamma.shape(), x.device());
    let (x, gamma, beta) = (host::<B>(x), host::<B>(gamma), host::<B>(beta));
    let (y, x_hat, rstd) = pointwise::layer_norm(&x, &gamma, &beta, epsilon as f32);
    let y = device_tensor::<B>(y, &shape, &device);
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
