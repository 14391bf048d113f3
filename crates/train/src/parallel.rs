//! What the ranks of one data-parallel run exchange ([`crate::world`]): the step's gradients
//! as one flat f32 buffer, averaged; a checksum of the parameters at every evaluation; and
//! rank 0's word that the run is ready. Ranks other than 0 train through [`follow`], which
//! reads the run rank 0 prepared and writes nothing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use burn::module::{Module, ModuleVisitor, Param, ParamId};
use burn::optim::GradientsParams;
use burn::tensor::{Tensor, TensorData};
use headlab_kernels::to_host;
use headlab_model::Gpt;
use thiserror::Error;

use crate::world::{CHECKSUM_START, World, checksum};

/// Why the ranks of a run stopped together.
#[derive(Debug, Error)]
pub enum ParallelError {
    /// The parameters differ between ranks: something made one rank's arithmetic another's.
    #[error(
        "the {size} ranks' parameters differ at step {step} (checksums from {min:016x} to \
         {max:016x}): every rank must apply the same averaged gradient; the run stopped, its \
         last checkpoint is kept: resume it, and report this if it happens again"
    )]
    Drift {
        /// The step of the evaluation that compared them.
        step: usize,
        /// The world size.
        size: usize,
        /// The smallest checksum.
        min: u64,
        /// The largest checksum.
        max: u64,
    },
}

/// Collects every gradient, in the model's parameter order, into one flat buffer.
struct Flatten<'a> {
    grads: &'a GradientsParams,
    flat: Vec<f32>,
    /// Each gradient's parameter, shape, and where it starts in `flat`.
    parts: Vec<(ParamId, Vec<usize>, usize)>,
}

impl ModuleVisitor for Flatten<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(g) = self.grads.get::<D>(param.id) {
            self.parts
                .push((param.id, g.dims().to_vec(), self.flat.len()));
            self.flat.extend(to_host::<f32, D>(g));
        }
    }
}

/// Puts the averaged buffer back as gradients, in the same order.
struct Unflatten<'a> {
    grads: GradientsParams,
    old: &'a GradientsParams,
    flat: &'a [f32],
    parts: std::slice::Iter<'a, (ParamId, Vec<usize>, usize)>,
}

impl ModuleVisitor for Unflatten<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let Some(old) = self.old.get::<D>(param.id) else {
            return;
        };
        let (id, shape, start) = self.parts.next().expect("the same parameters, in order");
        debug_assert_eq!(*id, param.id);
        let n: usize = shape.iter().product();
        let data = TensorData::new(self.flat[*start..start + n].to_vec(), shape.clone());
        self.grads
            .register::<D>(param.id, Tensor::<D>::from_data(data, &old.device()));
    }
}

/// Every rank's gradients and loss summed, then divided by `split` (the ranks that shared each
/// micro-batch's rows): the single process's gradients, up to the order of the sums. The
/// gradients go in one flat f32 all-reduce, the loss in an f64 one.
pub fn average(
    model: &Gpt,
    grads: GradientsParams,
    loss: f64,
    world: &World,
    split: usize,
) -> (GradientsParams, f64) {
    let mut flatten = Flatten {
        grads: &grads,
        flat: Vec::new(),
        parts: Vec::new(),
    };
    model.visit(&mut flatten);
    let (mut flat, parts) = (flatten.flat, flatten.parts);
    world.sum_f32(&mut flat);
    let mut loss = [loss];
    world.sum_f64(&mut loss);
    if split > 1 {
        let inv = 1.0 / split as f32;
        flat.iter_mut().for_each(|g| *g *= inv);
        loss[0] /= split as f64;
    }
    let mut unflatten = Unflatten {
        grads: GradientsParams::new(),
        old: &grads,
        flat: &flat,
        parts: parts.iter(),
    };
    model.visit(&mut unflatten);
    (unflatten.grads, loss[0])
}

/// Bytes one rank sends per step in the gradient all-reduce: 4 per parameter with a gradient.
pub fn exchange_bytes(model: &Gpt) -> usize {
    4 * model.num_params()
}

/// A checksum of every parameter's bits, in the model's order.
struct Checksum(u64);

impl ModuleVisitor for Checksum {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.0 = checksum(to_host::<f32, D>(param.val()), self.0);
    }
}

/// The ranks' parameters compared at `step`: an error naming the step when any bit differs.
pub fn check_in_step(model: &Gpt, world: &World, step: usize) -> Result<(), ParallelError> {
    if world.size() <= 1 {
        return Ok(());
    }
    let mut sum = Checksum(CHECKSUM_START);
    model.visit(&mut sum);
    let (min, max) = world.min_max(sum.0);
    if min != max {
        return Err(ParallelError::Drift {
            step,
            size: world.size(),
            min,
            max,
        });
    }
    Ok(())
}

/// The line a rank prints when a signal ends it in the middle of training: under a launcher,
/// one rank failing or being stopped makes the launcher signal the others, which cannot
/// reach a checkpoint while they wait for it.
pub fn stop_line(world: &World, run: &Path, saved: Option<usize>) -> String {
    let kept = match saved {
        Some(step) => format!("its last checkpoint (step {step}) is intact"),
        None => "it had no checkpoint yet".to_string(),
    };
    format!(
        "rank {} of {}: stopped by a signal while training {} (the launcher stops every rank \
         when one fails or is stopped); {kept}; continue it with: headlab train --resume {} \
         (under mpirun or srun, any number of ranks)",
        world.rank(),
        world.size(),
        run.display(),
        run.display()
    )
}

static IN_RUN: AtomicBool = AtomicBool::new(false);

/// Rank 0 tells the others that a run is ready in `run` at step `start` (`resuming`: from its
/// `last` checkpoint): they read it and train their shares until its last step.
pub fn send_ready(world: &World, start: usize, run: &Path, resuming: bool) {
    world.broadcast(start as u64 + 1);
    world.broadcast_bytes(run.as_os_str().as_encoded_bytes());
    world.broadcast(u64::from(resuming));
    IN_RUN.store(true, Ordering::SeqCst);
}

/// Rank 0's run reached its last step: the others have left its exchanges.
pub fn run_done() {
    IN_RUN.store(false, Ordering::SeqCst);
}

/// Rank 0, at the end of its command: tells the others that no run follows, so they exit.
/// Not while a run is between its exchanges (it failed there): rank 0 then exits without a
/// word and the launcher stops the others.
pub fn release(world: &World) {
    if world.size() > 1 && world.is_root() && !IN_RUN.load(Ordering::SeqCst) {
        world.broadcast(0);
    }
}

/// A run rank 0 announced ([`send_ready`]).
#[derive(Debug, Clone)]
pub struct Ready {
    /// Its folder.
    pub run: PathBuf,
    /// The step training starts at.
    pub start: usize,
    /// Whether it continues from its `last` checkpoint.
    pub resuming: bool,
}

/// What a rank other than 0 hears next: a run to train its share of, or `None`: rank 0 is
/// done (or stopped before training; it says why).
pub fn await_ready(world: &World) -> Option<Ready> {
    let start = world.broadcast(0).checked_sub(1)?;
    let bytes = world.broadcast_bytes(&[]);
    let run = PathBuf::from(String::from_utf8_lossy(&bytes).into_owned());
    let resuming = world.broadcast(0) == 1;
    Some(Ready {
        run,
        start: start as usize,
        resuming,
    })
}
