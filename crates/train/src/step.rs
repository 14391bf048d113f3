//! One optimizer step, as `headlab train` takes it and `headlab compare` repeats it on each
//! backend and in f64: the learning rate of step `it`, `grad_accum` micro-batches drawn for
//! it, each loss scaled by `1 / grad_accum`, gradients accumulated, the global norm clipped to
//! `train.grad_clip`, then one AdamW update. [`take_step`] is the one place those follow each
//! other. Under MPI ([`crate::world`]) a rank computes its [`Shard`] of the step and the
//! gradients are averaged across ranks before the norm is taken.

use std::time::Instant;

use burn::optim::{GradientsAccumulator, GradientsParams};
use burn::tensor::Device;
use headlab_data::{
    DataError, Dataset, STREAM_BATCH, STREAM_DEVICE, Split, batch_tensors, mix_seed,
};
use headlab_model::{Gpt, cross_entropy};
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::config::OptimizerKind;
use crate::config::TrainConfig;
use crate::optim::{MuonConfig, Optimizer, OptimizerConfig, global_grad_norm};
use crate::world::{Shard, ShardError, World};

/// The ranks one step is shared among and this rank's part: [`Team::alone`] for one process.
#[derive(Debug)]
pub struct Team<'a> {
    /// The ranks; `None`: this process alone.
    pub world: Option<&'a World>,
    /// This rank's micro-batches and rows.
    pub shard: Shard,
}

impl Team<'_> {
    /// One process computing the whole step.
    pub fn alone(train: &TrainConfig) -> Team<'static> {
        Team {
            world: None,
            shard: Shard::whole(train.grad_accum, train.batch_size),
        }
    }
}

impl<'a> Team<'a> {
    /// `world`'s ranks sharing the steps of `train`: refused when they cannot share equally.
    pub fn of(world: &'a World, train: &TrainConfig) -> Result<Team<'a>, ShardError> {
        Ok(Team {
            world: (world.size() > 1).then_some(world),
            shard: Shard::of(
                world.rank(),
                world.size(),
                train.grad_accum,
                train.batch_size,
            )?,
        })
    }
}

/// The gradients of step `it`, before clipping.
#[derive(Debug)]
pub struct StepGradients {
    /// Summed over the micro-batches.
    pub grads: GradientsParams,
    /// The step's loss: the mean over its micro-batches.
    pub loss: f64,
    /// Global L2 norm of `grads` over every parameter.
    pub norm: f64,
    /// Seconds in forward passes (with the loss).
    pub forward_s: f64,
    /// Seconds in backward passes and accumulation.
    pub backward_s: f64,
    /// Seconds computing `norm` (part of the optimizer's work in `headlab compare`).
    pub norm_s: f64,
    /// Seconds averaging the gradients across ranks (0 for one process).
    pub exchange_s: f64,
}

/// One micro-batch: `[batch_size * block_size]` inputs and targets, row-major.
pub type Batch = (Vec<u32>, Vec<u32>);

/// The batches `headlab train` draws at step `it` (every micro-batch).
pub fn step_batches(
    data: &Dataset,
    train: &TrainConfig,
    block_size: usize,
    it: usize,
) -> Result<Vec<Batch>, DataError> {
    let mut rng = StdRng::seed_from_u64(mix_seed(train.seed, it as u64, STREAM_BATCH));
    (0..train.grad_accum)
        .map(|_| data.sample_batch(Split::Train, train.batch_size, block_size, &mut rng))
        .collect()
}

/// Forward and backward over step `it`'s micro-batches on `device` (an autodiff device): the
/// team's share of them, averaged across its ranks. With `sync`, the device finishes its
/// queued work before each timing is read, so the timings of asynchronous backends mean what
/// they say.
pub fn gradients(
    model: &Gpt,
    data: &Dataset,
    train: &TrainConfig,
    it: usize,
    device: &Device,
    sync: bool,
    team: &Team<'_>,
) -> Result<StepGradients, DataError> {
    let t = model.config.block_size;
    let shard = &team.shard;
    // Rank 0 draws the single process's dropout masks; the others draw their own.
    let rank = team.world.map_or(0, |w| w.rank() as u64);
    device.seed(mix_seed(train.seed, it as u64, STREAM_DEVICE).wrapping_add(rank));
    let mut accumulator = GradientsAccumulator::<Gpt>::new();
    let (mut loss_sum, mut forward_s, mut backward_s) = (0.0, 0.0, 0.0);
    // Every micro-batch is drawn, so the data's random stream is the same on every rank.
    for (m, (x, y)) in step_batches(data, train, t, it)?.into_iter().enumerate() {
        if !shard.micro.contains(&m) {
            continue;
        }
        // [b * t] -> this rank's rows [rows * t]
        let rows = shard.rows.clone();
        let (x, y) = (
            &x[rows.start * t..rows.end * t],
            &y[rows.start * t..rows.end * t],
        );
        let (x, y) = batch_tensors(x, y, rows.len(), t, device);
        let start = Instant::now();
        let loss = cross_entropy(model.forward(x), y, None).div_scalar(train.grad_accum as f64);
        loss_sum += loss.clone().into_scalar::<f64>();
        forward_s += start.elapsed().as_secs_f64();
        let start = Instant::now();
        let grads = GradientsParams::from_grads(loss.backward(), model);
        accumulator.accumulate(model, grads);
        if sync {
            // A failed sync shows up at the next read of the device; timing goes on.
            let _ = device.sync();
        }
        backward_s += start.elapsed().as_secs_f64();
    }
    let mut grads = accumulator.grads();
    let mut exchange_s = 0.0;
    if let Some(world) = team.world {
        let start = Instant::now();
        (grads, loss_sum) = crate::parallel::average(model, grads, loss_sum, world, shard.split);
        exchange_s = start.elapsed().as_secs_f64();
    }
    let start = Instant::now();
    let norm = global_grad_norm(model, &grads);
    Ok(StepGradients {
        grads,
        loss: loss_sum,
        norm,
        forward_s,
        backward_s,
        norm_s: start.elapsed().as_secs_f64(),
        exchange_s,
    })
}

/// AdamW, and Muon when asked for, as `[train]` sets them.
pub fn optimizer_config(train: &TrainConfig) -> OptimizerConfig {
    OptimizerConfig {
        beta1: train.beta1,
        beta2: train.beta2,
        eps: 1e-8,
        weight_decay: train.weight_decay,
        muon: (train.optimizer == OptimizerKind::Muon).then(|| MuonConfig {
            lr_ratio: train.muon_lr / train.lr,
            momentum: train.muon_momentum,
            weight_decay: train.muon_weight_decay,
        }),
    }
}

/// What step `it` did, besides the model it returned.
#[derive(Debug)]
pub struct Step {
    /// Its gradients (before clipping), loss and timings.
    pub gradients: StepGradients,
    /// Its learning rate.
    pub lr: f64,
    /// Seconds in the update (after a device sync when timings were asked to be synced).
    pub update_s: f64,
}

/// Step `it` of a run: the learning rate the schedule gives it, the gradients of its
/// micro-batches ([`gradients`]), then the clipped AdamW update ([`update`]). `inspect` sees
/// the model, its gradients and the rate before they are applied and may stop the step (the loop's
/// divergence check); with `sync`, timings wait for the device.
pub fn take_step<E: From<DataError>>(
    model: Gpt,
    optim: &mut Optimizer,
    data: &Dataset,
    train: &TrainConfig,
    it: usize,
    device: &Device,
    sync: bool,
    team: &Team<'_>,
    inspect: impl FnOnce(&Gpt, &StepGradients, f64) -> Result<(), E>,
) -> Result<(Gpt, Step), E> {
    let lr = train.lr_at(it);
    let gradients = gradients(&model, data, train, it, device, sync, team)?;
    inspect(&model, &gradients, lr)?;
    let start = Instant::now();
    let model = update(model, optim, &gradients, lr, train.grad_clip);
    if sync {
        // As in `gradients`: a failed sync shows up at the next read of the device.
        let _ = device.sync();
    }
    let update_s = start.elapsed().as_secs_f64();
    Ok((
        model,
        Step {
            gradients,
            lr,
            update_s,
        },
    ))
}

/// Clips the gradients' global norm to `grad_clip` (0: no clipping) and takes one AdamW step
/// at learning rate `lr`.
pub fn update(
    model: Gpt,
    optim: &mut Optimizer,
    step: &StepGradients,
    lr: f64,
    grad_clip: f64,
) -> Gpt {
    let scale = if grad_clip > 0.0 && step.norm > grad_clip {
        grad_clip / (step.norm + 1e-6)
    } else {
        1.0
    };
    optim.step(model, &step.grads, lr, scale)
}
