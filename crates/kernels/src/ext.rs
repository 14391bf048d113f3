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

/// Attention as one op. Listed backends only: [`crate::flash_attention`] checks first.
#[backend_extension(Flex, NdArray, Autodiff)]
pub trait FlashAttentionBackend: Backend {
    /// `softmax(q k^T / sqrt(d_k) + causal mask) v` for `q [b, h, t_q, d_k]`,
    /// `k, v [b, h, t_k, d_k]`.
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: bool,
    ) -> FloatTensor<Self>;
}

impl FlashAttentionBackend for Flex {
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: bool,
    ) -> FloatTensor<Self> {
        forward::<Self>(q, k, v, causal).0
    }
}

impl FlashAttentionBackend for NdArray {
    fn flash_attention(
        q: FloatTensor<Self>,
        k: FloatTensor<Self>,
        v: FloatTensor<Self>,
        causal: bool,
    ) -> FloatTensor<Self> {
        forward::<Self>(q, k, v, causal).0
    }
}

impl<B: Backend, C: CheckpointStrategy> FlashAttentionBackend for Autodiff<B, C> {
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
                let (out, saved) = forward::<B>(
                    q.into_primitive(),
                    k.into_primitive(),
                    v.into_primitive(),
                    causal,
                );
                prep.finish(Arc::new(saved), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(
                forward::<B>(
                    q.into_primitive(),
                    k.into_primitive(),
                    v.into_primitive(),
                    causal,
                )
                .0,
            ),
        }
    }
}

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
    type State = Arc<Saved<<FloatTensor<B> as TensorMetadata>::Device>>;

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

/// Runs the forward kernel on `B`'s tensors; returns the output and what the backward needs.
fn forward<B: Backend>(
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
    device: &<FloatTensor<B> as TensorMetadata>::Device,
) -> FloatTensor<B> {
    B::float_from_data(TensorData::new(data, shape.clone()), device)
}
