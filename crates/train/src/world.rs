//! Data parallelism across processes: the ranks that `mpirun -np N` or Slurm's `srun` starts
//! train one model together (DDP's scheme). Each rank draws the same global batch from the
//! seed and takes its own shard ([`Shard`]); after backward, the gradients of every parameter
//! travel in one flat f32 all-reduce and are averaged, so clipping and the optimizer step see
//! the same numbers on every rank and the parameters stay bitwise equal. Rank 0 alone
//! evaluates and writes.
//!
//! A single process is a world of one and never touches MPI. MPI itself is the `mpi` cargo
//! feature (rsmpi over the system's Open MPI); without it, a launch as several ranks is
//! refused ([`WorldError::NoMpi`]) rather than training N copies of one run side by side.

use std::sync::OnceLock;

use thiserror::Error;

/// Whether this build can run as several ranks (the `mpi` feature).
pub const MPI_BUILT: bool = cfg!(feature = "mpi");

/// Where the launcher's environment says this process stands, before MPI starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank.
    pub rank: usize,
    /// The number of ranks.
    pub size: usize,
    /// The variable that said so, for messages (`OMPI_COMM_WORLD_SIZE=2`).
    pub by: String,
}

/// The launch that `env` describes: Open MPI's `mpirun` (`OMPI_COMM_WORLD_*`), an `srun` step
/// (`SLURM_STEP_NUM_TASKS`, `SLURM_PROCID`: set in its tasks, not in the batch script that
/// calls it) or MPICH's hydra (`PMI_SIZE`, `PMI_RANK`); `None` when none of them started it.
pub fn launch_from(env: impl Fn(&str) -> Option<String>) -> Option<Launch> {
    let read = |size: &str, rank: &str| {
        let n: usize = env(size)?.trim().parse().ok()?;
        let r: usize = env(rank)?.trim().parse().ok()?;
        Some(Launch {
            rank: r,
            size: n,
            by: format!("{size}={n}"),
        })
    };
    read("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK")
        .or_else(|| read("SLURM_STEP_NUM_TASKS", "SLURM_PROCID"))
        .or_else(|| read("PMI_SIZE", "PMI_RANK"))
}

/// What stops a world from forming.
#[derive(Debug, Error)]
pub enum WorldError {
    /// Started as several ranks by a build without the `mpi` feature.
    #[error(
        "headlab was started as {size} ranks ({by}), but this binary was built without MPI, so \
         each rank would train the whole run alone: build it with `cargo build --release \
         --features mpi` (Open MPI and libclang installed: apt-get install openmpi-bin \
         libopenmpi-dev libclang-dev), or run it without mpirun/srun"
    )]
    NoMpi {
        /// The world size the launcher asked for.
        size: usize,
        /// The variable that said so.
        by: String,
    },
    /// MPI did not start, or started with another size than the launcher's environment says.
    #[error("MPI did not start as the launcher asked ({by}): {message}")]
    Start {
        /// The variable that asked.
        by: String,
        /// What went wrong.
        message: String,
    },
}

/// The processes training one model, and this one's rank among them. MPI itself lives on the
/// thread that formed the world ([`init`]), which makes every call (the training loop's).
pub struct World {
    rank: usize,
    size: usize,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "World(rank {} of {})", self.rank, self.size)
    }
}

static WORLD: OnceLock<World> = OnceLock::new();

/// Forms the world from the launcher's environment, once per process, on the thread that will
/// train (the binary calls this first): a world of one when no launcher started the process.
pub fn init() -> Result<&'static World, WorldError> {
    if let Some(world) = WORLD.get() {
        return Ok(world);
    }
    let world = World::from_launch(launch_from(|k| std::env::var(k).ok()))?;
    Ok(WORLD.get_or_init(|| world))
}

/// The world [`init`] formed; a world of one before it (library callers, tests).
pub fn get() -> &'static World {
    WORLD.get_or_init(World::single)
}

/// Ends MPI cleanly (the launcher reports a rank that exits without it as a failure). The
/// binary calls it, on the thread of [`init`], before exiting; a world of one has nothing to
/// end.
pub fn finish() {
    #[cfg(feature = "mpi")]
    mpi_world::finish();
}

impl World {
    /// One process, no MPI.
    pub fn single() -> World {
        World { rank: 0, size: 1 }
    }

    fn from_launch(launch: Option<Launch>) -> Result<World, WorldError> {
        let Some(launch) = launch.filter(|l| l.size > 1) else {
            return Ok(World::single());
        };
        #[cfg(feature = "mpi")]
        {
            let (rank, size) = mpi_world::start().map_err(|message| WorldError::Start {
                by: launch.by.clone(),
                message,
            })?;
            if size != launch.size || rank != launch.rank {
                return Err(WorldError::Start {
                    by: launch.by,
                    message: format!(
                        "MPI says rank {rank} of {size}, the environment rank {} of {}",
                        launch.rank, launch.size
                    ),
                });
            }
            Ok(World { rank, size })
        }
        #[cfg(not(feature = "mpi"))]
        Err(WorldError::NoMpi {
            size: launch.size,
            by: launch.by,
        })
    }

    /// This process's rank (0: the one that writes).
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether this rank evaluates, prints and writes the run: rank 0.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// Every rank's `values` summed element-wise, in place, the same on every rank.
    pub fn sum_f32(&self, values: &mut [f32]) {
        #[cfg(feature = "mpi")]
        if self.size > 1 {
            mpi_world::sum_f32(values);
        }
        let _ = values;
    }

    /// As [`World::sum_f32`], for f64 (the step's loss).
    pub fn sum_f64(&self, values: &mut [f64]) {
        #[cfg(feature = "mpi")]
        if self.size > 1 {
            mpi_world::sum_f64(values);
        }
        let _ = values;
    }

    /// The smallest and largest of every rank's `value` (a checksum is equal everywhere when
    /// the two are).
    pub fn min_max(&self, value: u64) -> (u64, u64) {
        #[cfg(feature = "mpi")]
        if self.size > 1 {
            return mpi_world::min_max(value);
        }
        (value, value)
    }

    /// Rank 0's `value`, on every rank: the root tells the others how its part went.
    pub fn broadcast(&self, value: u64) -> u64 {
        #[cfg(feature = "mpi")]
        if self.size > 1 {
            return mpi_world::broadcast(value);
        }
        value
    }

    /// Rank 0's `bytes`, on every rank (what the others pass is ignored).
    pub fn broadcast_bytes(&self, bytes: &[u8]) -> Vec<u8> {
        #[cfg(feature = "mpi")]
        if self.size > 1 {
            let mut out = bytes.to_vec();
            out.resize(mpi_world::broadcast(bytes.len() as u64) as usize, 0);
            mpi_world::broadcast_bytes(&mut out);
            return out;
        }
        bytes.to_vec()
    }
}

/// The rsmpi calls, behind the `mpi` feature. MPI's handles are not `Send`: they stay in a
/// thread-local of the thread that started MPI.
#[cfg(feature = "mpi")]
mod mpi_world {
    use std::cell::RefCell;

    use mpi::Threading;
    use mpi::collective::SystemOperation;
    use mpi::topology::{Communicator, SimpleCommunicator};
    use mpi::traits::*;

    struct Mpi {
        /// Dropping the universe finalizes MPI.
        _universe: mpi::environment::Universe,
        comm: SimpleCommunicator,
    }

    thread_local! {
        static MPI: RefCell<Option<Mpi>> = const { RefCell::new(None) };
    }

    fn with<R>(f: impl FnOnce(&SimpleCommunicator) -> R) -> R {
        MPI.with_borrow(|mpi| {
            let mpi = mpi
                .as_ref()
                .expect("MPI is called from the thread that started it (world::init)");
            f(&mpi.comm)
        })
    }

    /// Starts MPI (serialized: the training thread, which need not be the process's main
    /// one, makes every call) and gives this process's rank and the world size.
    pub fn start() -> Result<(usize, usize), String> {
        let (universe, _level) = mpi::initialize_with_threading(Threading::Serialized)
            .ok_or_else(|| "MPI was initialised already in this process".to_string())?;
        let comm = universe.world();
        let ranks = (comm.rank() as usize, comm.size() as usize);
        MPI.with_borrow_mut(|mpi| {
            *mpi = Some(Mpi {
                _universe: universe,
                comm,
            })
        });
        Ok(ranks)
    }

    pub fn sum_f32(values: &mut [f32]) {
        // The safe API has no MPI_IN_PLACE: one copy per call.
        let send = values.to_vec();
        with(|c| c.all_reduce_into(&send[..], values, SystemOperation::sum()));
    }

    pub fn sum_f64(values: &mut [f64]) {
        let send = values.to_vec();
        with(|c| c.all_reduce_into(&send[..], values, SystemOperation::sum()));
    }

    pub fn min_max(value: u64) -> (u64, u64) {
        let (mut min, mut max) = (0u64, 0u64);
        with(|c| {
            c.all_reduce_into(&value, &mut min, SystemOperation::min());
            c.all_reduce_into(&value, &mut max, SystemOperation::max());
        });
        (min, max)
    }

    pub fn broadcast(value: u64) -> u64 {
        let mut v = value;
        with(|c| c.process_at_rank(0).broadcast_into(&mut v));
        v
    }

    pub fn broadcast_bytes(bytes: &mut [u8]) {
        with(|c| c.process_at_rank(0).broadcast_into(bytes));
    }

    pub fn finish() {
        MPI.with_borrow_mut(|mpi| drop(mpi.take()));
    }
}

/// The rows of a global batch one rank computes: micro-batches `micro` of each step's
/// `train.grad_accum` and, of each, rows `rows`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    /// The micro-batches this rank draws gradients from (all draw every micro-batch, so the
    /// data's random stream is the single process's).
    pub micro: Vec<usize>,
    /// The rows of each of its micro-batches.
    pub rows: std::ops::Range<usize>,
    /// What the summed gradients of all ranks are divided by to be the single process's:
    /// the number of ranks sharing each micro-batch's rows.
    pub split: usize,
}

/// Why a config cannot be shared among the world's ranks.
#[derive(Debug, Error, PartialEq)]
pub enum ShardError {
    /// More ranks than rows or micro-batches to give them.
    #[error(
        "{size} ranks cannot share a step of {grad_accum} micro-batch(es) of {batch_size} rows \
         (train.grad_accum x train.batch_size): run at most {batch_size} ranks, or raise \
         train.batch_size"
    )]
    TooMany {
        /// World size.
        size: usize,
        /// train.batch_size.
        batch_size: usize,
        /// train.grad_accum.
        grad_accum: usize,
    },
    /// Rows that do not split evenly.
    #[error(
        "train.batch_size = {batch_size} does not divide among {size} ranks (nor does \
         train.grad_accum = {grad_accum}): every rank needs an equal share of the batch; use a \
         batch size that is a multiple of {size}, or run {divisors}"
    )]
    Uneven {
        /// World size.
        size: usize,
        /// train.batch_size.
        batch_size: usize,
        /// train.grad_accum.
        grad_accum: usize,
        /// The world sizes that would divide it, as words.
        divisors: String,
    },
}

impl Shard {
    /// The whole step: one process.
    pub fn whole(grad_accum: usize, batch_size: usize) -> Shard {
        Shard {
            micro: (0..grad_accum).collect(),
            rows: 0..batch_size,
            split: 1,
        }
    }

    /// Rank `rank`'s share of a step of `grad_accum` micro-batches of `batch_size` rows among
    /// `size` ranks. Whole micro-batches where their count divides among the ranks (nanoGPT's
    /// `gradient_accumulation_steps //= world_size`: each rank computes exactly what the
    /// single process computes for them), otherwise an equal slice of every micro-batch's rows.
    pub fn of(
        rank: usize,
        size: usize,
        grad_accum: usize,
        batch_size: usize,
    ) -> Result<Shard, ShardError> {
        if size <= 1 {
            return Ok(Shard::whole(grad_accum, batch_size));
        }
        if grad_accum.is_multiple_of(size) {
            return Ok(Shard {
                micro: (rank..grad_accum).step_by(size).collect(),
                rows: 0..batch_size,
                split: 1,
            });
        }
        if size > batch_size {
            return Err(ShardError::TooMany {
                size,
                batch_size,
                grad_accum,
            });
        }
        if !batch_size.is_multiple_of(size) {
            let divisors: Vec<String> = (2..=batch_size)
                .filter(|n| batch_size.is_multiple_of(*n) || grad_accum.is_multiple_of(*n))
                .take(6)
                .map(|n| n.to_string())
                .collect();
            return Err(ShardError::Uneven {
                size,
                batch_size,
                grad_accum,
                divisors: format!("{} ranks", divisors.join(", ")),
            });
        }
        let per = batch_size / size;
        Ok(Shard {
            micro: (0..grad_accum).collect(),
            rows: rank * per..(rank + 1) * per,
            split: size,
        })
    }

    /// Whether this is the whole step.
    pub fn is_whole(&self, grad_accum: usize, batch_size: usize) -> bool {
        self.split == 1 && self.rows == (0..batch_size) && self.micro.len() == grad_accum
    }
}

/// An order-sensitive checksum of f32 values' bits (FNV-1a over them): equal exactly when
/// the parameters are bitwise equal, up to a collision.
pub fn checksum(values: impl IntoIterator<Item = f32>, mut hash: u64) -> u64 {
    for v in values {
        for byte in v.to_bits().to_le_bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

/// [`checksum`]'s starting value.
pub const CHECKSUM_START: u64 = 0xcbf2_9ce4_8422_2325;

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn each_launcher_is_read_from_its_own_variables() {
        let ompi = [("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "1")];
        assert_eq!(
            launch_from(env(&ompi)),
            Some(Launch {
                rank: 1,
                size: 2,
                by: "OMPI_COMM_WORLD_SIZE=2".into()
            })
        );
        let srun = [("SLURM_STEP_NUM_TASKS", "4"), ("SLURM_PROCID", "3")];
        assert_eq!(
            launch_from(env(&srun)).map(|l| (l.rank, l.size)),
            Some((3, 4))
        );
        // A batch script has SLURM_NTASKS but is one process: not a launch.
        let batch = [("SLURM_NTASKS", "2"), ("SLURM_PROCID", "0")];
        assert_eq!(launch_from(env(&batch)), None);
        assert_eq!(launch_from(env(&[])), None);
    }

    #[test]
    fn a_world_of_one_needs_no_mpi_and_several_do() {
        let one = Launch {
            rank: 0,
            size: 1,
            by: "OMPI_COMM_WORLD_SIZE=1".into(),
        };
        assert_eq!(World::from_launch(Some(one)).unwrap().size(), 1);
        #[cfg(not(feature = "mpi"))]
        {
            let two = Launch {
                rank: 0,
                size: 2,
                by: "OMPI_COMM_WORLD_SIZE=2".into(),
            };
            let e = World::from_launch(Some(two)).unwrap_err().to_string();
            assert!(e.contains("2 ranks (OMPI_COMM_WORLD_SIZE=2)"), "{e}");
            assert!(e.contains("--features mpi"), "{e}");
        }
    }

    /// Every row of every micro-batch is computed by exactly one rank, whatever the split.
    #[test]
    fn shards_cover_each_row_once() {
        for (size, accum, batch) in [(2, 1, 24), (2, 4, 12), (3, 3, 5), (4, 2, 8), (3, 1, 12)] {
            let mut seen = vec![0; accum * batch];
            for rank in 0..size {
                let s = Shard::of(rank, size, accum, batch).unwrap();
                for &m in &s.micro {
                    for r in s.rows.clone() {
                        seen[m * batch + r] += 1;
                    }
                }
            }
            assert!(
                seen.iter().all(|&n| n == 1),
                "{size} {accum} {batch}: {seen:?}"
            );
        }
        // Whole micro-batches when they divide, nanoGPT's way.
        assert_eq!(Shard::of(1, 2, 4, 12).unwrap().micro, vec![1, 3]);
        assert_eq!(Shard::of(1, 2, 1, 24).unwrap().rows, 12..24);
    }

    #[test]
    fn shares_that_cannot_be_equal_are_refused() {
        assert!(matches!(
            Shard::of(0, 5, 1, 4),
            Err(ShardError::TooMany { size: 5, .. })
        ));
        let e = Shard::of(0, 5, 1, 24).unwrap_err().to_string();
        assert!(
            e.contains("train.batch_size = 24 does not divide among 5 ranks"),
            "{e}"
        );
        assert!(e.contains("2, 3, 4, 6, 8, 12 ranks"), "{e}");
    }

    #[test]
    fn the_checksum_sees_one_bit() {
        let a = checksum([1.0f32, 2.0, 3.0], CHECKSUM_START);
        let b = checksum(
            [1.0f32, 2.0, f32::from_bits(3.0f32.to_bits() ^ 1)],
            CHECKSUM_START,
        );
        assert_ne!(a, b);
        assert_eq!(a, checksum([1.0f32, 2.0, 3.0], CHECKSUM_START));
    }
}
