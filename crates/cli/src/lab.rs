//! `headlab lab <name>`: experiments on head specialisation that anyone can rerun.
//!
//! - `induction`: a 2-layer attention-only model on the induction corpus forms the
//!   previous-token -> induction circuit of Olsson et al. 2022, with a visible phase change.
//! - `heads`: equal d_model and parameter count with 1..64 heads, several seeds, on a task
//!   that needs two lookups at once (the `lookup` corpus).
//! - `ambiguity`: on the `attach` corpus, where "with" and "and" look when what "with"
//!   attaches to decides the number of the last verb.
//! - `symmetry`: identical heads stay identical; a perturbation or a random start lets
//!   gradients pull them apart.
//! - `relations`: models with 1, 2 and 4 heads on the relations corpus: which head holds the
//!   verb's number and which the object's class, proven by zeroing each.
//! - `syntax`: word-level grammar models with 1, 2, 4 and 8 heads over seeds: which relations
//!   find a syntactic head, when it forms, and what zeroing it does.
//!
//! Each lab writes its runs, pictures and a `summary.md` into its output directory. This
//! module only parses the options; the experiments, summaries and files are
//! `headlab_labs`'s, one module per lab.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, Subcommand};
use headlab_kernels::BackendKind;
use headlab_labs::{Runs, ambiguity, grokking, head_count, induction, relations, symmetry, syntax};
use headlab_train::run::{
    Holder, RunError, TrainingMark, holder_name, mark_holder, mark_training, stop_advice,
};
use headlab_train::stop;

use crate::common::{observers, whole_number};
use crate::slurm::{Launcher, SlurmArgs, submit, which};
use headlab_labs::sweep::{LAB_RUN, SweepSpec, parse_axis};

/// `headlab lab <name>`: each experiment is a subcommand, so `headlab lab NAME --help` says
/// what that one trains, how long it takes and what it writes.
#[derive(Debug, Args)]
pub struct LabArgs {
    #[command(subcommand)]
    pub name: LabName,
}

/// Which experiment, with the options only it takes.
#[derive(Debug, Subcommand)]
pub enum LabName {
    /// The induction-head phase change: a 2-layer attention-only model forms the
    /// previous-token -> induction circuit.
    #[command(
        long_about = "The induction-head phase change (Olsson et al. 2022).\n\n\
        Trains one model: 2 layers x 2 heads, attention only, d_model 64, RoPE, block 64, on \
        the built-in induction corpus (random letters, each line repeated once), 2000 steps \
        of batch 32, head scores and maps every 50 steps (configs/lab-induction.toml).\n\n\
        Writes into --out (default runs/lab-induction): run/ (the training run), summary.md \
        (when the phase change happened, which head became the previous-token head and which \
        the induction head, with their scores and ablations), heads.png, loss.png, \
        report.html (the run's page with the maps replayed over training) and the head \
        table (heads.csv, heads.json, attention.png, heads.html)."
    )]
    Induction {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        misplaced: HeadsOnly,
    },
    /// One head vs many at equal parameters: 1..64 heads on a task that needs two lookups.
    #[command(long_about = "One head vs many at equal parameters.\n\n\
        Trains one model per head count and seed: 1 layer, d_model 64 split into h heads of \
        d_k = 64/h (the same parameters for every h), block 32, on the built-in lookup corpus \
        (each letter set by the letters 2 and 6 back), 1500 steps of batch 32 \
        (configs/lab-heads.toml).\n\n\
        Writes into --out (default runs/lab-heads): one run per count and seed (h<H>-s<SEED>/, \
        each with its report.html), val_loss.csv (val loss, accuracy and every run's head \
        labels), heads.png (val loss against the head count, seeds as a range) and summary.md \
        (which counts are level, and in 2-head runs which head fetches which source).")]
    Heads {
        #[command(flatten)]
        common: Common,
        /// Seeds (comma-separated; default 1,2,3).
        #[arg(long, value_delimiter = ',', allow_negative_numbers = true, value_parser = whole_number::<u64>)]
        seeds: Option<Vec<u64>>,
        /// Head counts (comma-separated; default 1,2,4,8,16,32,64).
        #[arg(long, value_delimiter = ',', allow_negative_numbers = true, value_parser = whole_number::<usize>)]
        heads: Option<Vec<usize>>,
    },
    /// Syntactic heads by head count: 1, 2, 4 and 8 heads on word-level grammar, over seeds.
    #[command(long_about = "Syntactic heads by head count.\n\n\
        Trains one model per head count and seed: the default run's model (2 layers, d_model \
        128 split into h heads, word tokens, block 64) for 1000 steps on the built-in grammar \
        corpus (configs/lab-syntax.toml). For each run: every relation's best head against \
        the best fixed-offset rule, the syntactic head, the step it formed at and what zeroing \
        it alone does to agreement, by construction.\n\n\
        Writes into --out (default runs/lab-syntax): one run per count and seed (h<H>-s<SEED>/, \
        each with heads/ and report.html), syntax.csv, syntax.png and summary.md (which \
        relations find a head on every seed).")]
    Syntax {
        #[command(flatten)]
        common: Common,
        /// Seeds (comma-separated; default 1,2,3).
        #[arg(long, value_delimiter = ',', allow_negative_numbers = true, value_parser = whole_number::<u64>)]
        seeds: Option<Vec<u64>>,
        /// Head counts (comma-separated; default 1,2,4,8).
        #[arg(long, value_delimiter = ',', allow_negative_numbers = true, value_parser = whole_number::<usize>)]
        heads: Option<Vec<usize>>,
    },
    /// Syntax and meaning at once: which head holds a verb's number and which its object,
    /// with 1, 2 and 4 heads, proven by zeroing each.
    #[command(long_about = "Syntax and meaning at once.\n\n\
        Trains one model per head count and seed: 2 layers, d_model 128 split into h heads, \
        word tokens, block 64, 1000 steps on the built-in relations corpus (\"the dog near the \
        cats chases one of the red mice.\": the verb's number comes from its subject, its \
        object from the verb) (configs/lab-relations.toml). For each run, on 600 test \
        sentences: each head's Clark score on the subject and the object relation against the \
        best fixed-offset rule, the two forced choices (the verb's number; an object that \
        fits the verb against one that does not), and both with each head zeroed alone.\n\n\
        Writes into --out (default runs/lab-relations): one run per count and seed \
        (h<H>-s<SEED>/, each with report.html), relations.csv, choices.png, zeroing.png, \
        report.html and heads.html (the run with the clearest double dissociation) and \
        summary.md.")]
    Relations {
        #[command(flatten)]
        common: Common,
        /// Seeds (comma-separated; default 1,2,3).
        #[arg(long, value_delimiter = ',', allow_negative_numbers = true, value_parser = whole_number::<u64>)]
        seeds: Option<Vec<u64>>,
        /// Head counts (comma-separated; default 1,2,4).
        #[arg(long, value_delimiter = ',', allow_negative_numbers = true, value_parser = whole_number::<usize>)]
        heads: Option<Vec<usize>>,
        /// The relations reported (comma-separated): subject, object (default both).
        #[arg(long)]
        relations: Option<String>,
    },
    /// Where "with" and "and" look when what "with" attaches to decides a later verb.
    #[command(long_about = "Prepositional-phrase attachment.\n\n\
        Trains one model: 2 layers x 4 heads, d_model 64, block 32, byte-level BPE of 400 \
        tokens, on the built-in attach corpus (\"... follow the spy with the camera and hide \
        it.\", where what \"with\" attaches to decides the last verb's number), 1000 steps of \
        batch 32, head scores and maps every 50 steps (configs/lab-ambiguity.toml).\n\n\
        Writes into --out (default runs/lab-ambiguity): run/ (the training run), summary.md \
        (agreement on forced and ambiguous readings, where each head of \"with\" and \"and\" \
        looks, and whether any head switches with the reading), report.html and the head \
        table (heads.csv, heads.json, attention.png, heads.html).")]
    Ambiguity {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        misplaced: HeadsOnly,
    },
    /// Why heads differ at all: identical heads stay identical; a perturbation or a random
    /// start lets gradients pull them apart.
    #[command(long_about = "Symmetry breaking.\n\n\
        Trains a small attention-only model (2 layers x 2 heads, d_model 64, RoPE, block 64) \
        on the built-in grammar corpus for 800 steps of batch 32 from one seed six ways: every \
        head of a layer starting identical (on flex and on ndarray, or flex on Burn's own ops \
        in a build without ndarray), identical plus a \
        perturbation of size 1e-6, 1e-4 and 1e-2 on one head, and the usual random start \
        (configs/lab-symmetry.toml). Every head's weights are checked against head 0's, bit \
        for bit, every 25 steps, and each model's final val loss is set against chance. \\n\n\
        Writes into --out (default runs/lab-symmetry): one run per start and backend (each \
        with head_history.csv, gradient norms included, and report.html), symmetry.csv, \
        symmetry.png (steps until the heads separate, against eps) and summary.md.")]
    Symmetry {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        misplaced: HeadsOnly,
    },
    /// Grokking: a 1-layer transformer on a + b mod p memorises its training pairs, then,
    /// much later, generalises to the rest.
    #[command(long_about = "Grokking (Power et al. 2022; Nanda et al. 2023).\n\n\
        Trains one model: 1 layer x 4 heads, d_model 128, MLP 512, learned positions, on the \
        built-in modular corpus \"a b =\" -> (a + b) mod p, full-batch AdamW with weight decay \
        1.0 on a fraction of the p x p pairs, test accuracy on the rest. Not a config file: \
        its settings are the flags below.\n\n\
        Writes into --out (default runs/lab-grokking): grokking.csv (train and test loss and \
        accuracy at every evaluation), grokking.png and loss.png (on a log step axis), \
        fourier.csv and fourier.png (the token embedding's share of norm at each frequency k \
        of cos/sin(2 pi k a / p): the key frequencies) and summary.md (the steps of \
        memorisation and generalisation).")]
    Grokking {
        /// Output directory (default: runs/lab-grokking).
        #[arg(long, short)]
        out: Option<PathBuf>,
        /// Overwrite the output directory if it exists.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        settings: GrokArgs,
    },
}

/// `lab grokking`'s settings; an unset one keeps [`grokking::GrokConfig`]'s default.
#[derive(Debug, Args)]
pub struct GrokArgs {
    /// The prime modulus p (the vocabulary is 0..p and "="); at most 211.
    #[arg(long, allow_negative_numbers = true, value_parser = whole_number::<u32>)]
    p: Option<u32>,
    /// Share of the p x p pairs trained on, in (0, 1).
    #[arg(long, allow_negative_numbers = true)]
    fraction: Option<f64>,
    /// Full-batch training steps.
    #[arg(long, allow_negative_numbers = true, value_parser = whole_number::<usize>)]
    steps: Option<usize>,
    /// Seed of the split and the initial weights.
    #[arg(long, allow_negative_numbers = true, value_parser = whole_number::<u64>)]
    seed: Option<u64>,
    /// AdamW learning rate.
    #[arg(long, allow_negative_numbers = true)]
    lr: Option<f64>,
    /// AdamW's decoupled weight decay.
    #[arg(long, allow_negative_numbers = true)]
    weight_decay: Option<f64>,
}

impl GrokArgs {
    /// The lab's config with these flags over its defaults.
    fn config(&self) -> grokking::GrokConfig {
        let d = grokking::GrokConfig::default();
        grokking::GrokConfig {
            p: self.p.unwrap_or(d.p),
            fraction: self.fraction.unwrap_or(d.fraction),
            steps: self.steps.unwrap_or(d.steps),
            seed: self.seed.unwrap_or(d.seed),
            lr: self.lr.unwrap_or(d.lr),
            weight_decay: self.weight_decay.unwrap_or(d.weight_decay),
            ..d
        }
    }
}

/// `lab heads`'s own options, hidden in the other labs so that giving them there says what to
/// use instead rather than only that they are unknown.
#[derive(Debug, Args)]
pub struct HeadsOnly {
    #[arg(long, hide = true)]
    seeds: Option<String>,
    #[arg(long, hide = true)]
    heads: Option<String>,
}

/// What every lab takes.
#[derive(Debug, Args)]
pub struct Common {
    /// Output directory (default: runs/lab-<name>).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Overwrite the output directory if it exists.
    #[arg(long)]
    pub force: bool,
    /// Continue a lab that was stopped (Ctrl-C, a crash), in the same --out: each run that
    /// finished with the same settings is kept, one stopped at a checkpoint continues from
    /// it, and the rest train.
    #[arg(long, conflicts_with = "force")]
    pub resume: bool,
    /// Override a config key of the lab's runs (repeatable), e.g. --set train.max_iters=300.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Backend of the lab's runs: flex, flex-burn, ndarray or wgpu (overrides train.backend).
    #[arg(long, short)]
    pub backend: Option<String>,
    /// Where the lab's runs train: here, or (lab heads, syntax, relations and symmetry) as
    /// one Slurm job array, one task per run; once they are done, the same command with --resume measures
    /// them and writes the summary.
    #[arg(long, value_enum, default_value = "local")]
    pub launcher: Launcher,
    /// Slurm's settings, with --launcher slurm.
    #[command(flatten)]
    pub slurm: SlurmArgs,
}

impl Common {
    /// `--set`s with `--backend` as one more.
    fn sets(&self) -> Result<Vec<String>> {
        let mut sets = self.set.clone();
        if let Some(backend) = &self.backend {
            backend.parse::<BackendKind>()?;
            sets.push(format!("train.backend={backend}"));
        }
        Ok(sets)
    }
}

/// Runs the lab.
pub fn run(args: LabArgs) -> Result<()> {
    let (name, out, force, resume) = match &args.name {
        LabName::Induction { common, .. } => {
            ("induction", &common.out, common.force, common.resume)
        }
        LabName::Heads { common, .. } => ("heads", &common.out, common.force, common.resume),
        LabName::Syntax { common, .. } => ("syntax", &common.out, common.force, common.resume),
        LabName::Relations { common, .. } => {
            ("relations", &common.out, common.force, common.resume)
        }
        LabName::Ambiguity { common, .. } => {
            ("ambiguity", &common.out, common.force, common.resume)
        }
        LabName::Symmetry { common, .. } => ("symmetry", &common.out, common.force, common.resume),
        LabName::Grokking { out, force, .. } => ("grokking", out, *force, false),
    };
    if let LabName::Induction { misplaced, .. }
    | LabName::Ambiguity { misplaced, .. }
    | LabName::Symmetry { misplaced, .. } = &args.name
        && (misplaced.seeds.is_some() || misplaced.heads.is_some())
    {
        bail!(
            "--seeds and --heads are for `lab heads`, `lab syntax` and `lab relations`; `lab \
             {name}` takes --set train.seed=N"
        );
    }
    let out = out
        .clone()
        .unwrap_or_else(|| Path::new("runs").join(format!("lab-{name}")));
    // Bad settings are refused before anything is removed or written.
    let sets = match &args.name {
        LabName::Induction { common, .. }
        | LabName::Heads { common, .. }
        | LabName::Syntax { common, .. }
        | LabName::Relations { common, .. }
        | LabName::Ambiguity { common, .. }
        | LabName::Symmetry { common, .. } => {
            if common.launcher == Launcher::Local {
                common.slurm.refuse_without_slurm()?;
            }
            common.sets()?
        }
        LabName::Grokking { settings, .. } => {
            settings.config().check()?;
            Vec::new()
        }
    };
    // `lab relations`'s relations, named before anything is written.
    let chosen = match &args.name {
        LabName::Relations {
            relations: Some(names),
            ..
        } => relations::parse_relations(names)?,
        _ => headlab_heads::relations::RELATIONS.to_vec(),
    };
    // The summary's "Reproduce" line starts the lab afresh; a stop request says how to
    // continue it.
    let reproduce = command_line(&["--resume"]);
    let resume_command = format!("{} --resume", command_line(&["--resume", "--force"]));
    if resume && !out.exists() {
        bail!(
            "nothing to resume: {} does not exist; to start the lab, leave out --resume",
            out.display()
        );
    }
    let in_use = |what: &Path, holder: Holder| {
        anyhow!(
            "{} is in use by {} now; wait for it to finish, or {} and then continue it with \
             --resume",
            what.display(),
            holder_name(holder),
            stop_advice(holder)
        )
    };
    // Taken in one step before anything in the folder changes: of two labs started together
    // on one folder, one runs and the other is refused, the folder untouched.
    let mark = match mark_training(&out) {
        Ok(mark) => mark,
        Err(RunError::InUse { pid, .. }) => return Err(in_use(&out, pid)),
        Err(e) => return Err(e.into()),
    };
    // A run in the folder that a process trains on its own (`train --resume`).
    if let Some((what, holder)) = busy_run(&out) {
        return Err(in_use(&what, holder));
    }
    if out.exists() && !resume {
        if !force {
            let continues = match name {
                "grokking" => String::new(),
                _ => format!(", or continue a lab stopped there with: {resume_command}"),
            };
            bail!(
                "{} already exists; choose another --out, pass --force to replace it{continues}",
                out.display()
            );
        }
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    let in_use = InUse::new(&out, mark)?;
    if let LabName::Heads { common, .. }
    | LabName::Syntax { common, .. }
    | LabName::Relations { common, .. }
    | LabName::Induction { common, .. }
    | LabName::Ambiguity { common, .. }
    | LabName::Symmetry { common, .. } = &args.name
        && common.launcher == Launcher::Slurm
        && !resume
    {
        let list = |v: Vec<String>| v.join(",");
        let grid = |config: &str, toml_name: &str, heads: Vec<usize>, seeds: Vec<u64>| {
            let base = headlab_labs::lab_config(config, toml_name, &sets)?;
            anyhow::Ok(SweepSpec {
                base_name: format!("lab {name} ({toml_name})"),
                base: base.to_toml_string()?,
                sets: Vec::new(),
                axes: vec![
                    parse_axis(&format!(
                        "model.n_heads={}",
                        list(heads.iter().map(|h| h.to_string()).collect())
                    ))?,
                    parse_axis(&format!(
                        "train.seed={}",
                        list(seeds.iter().map(|s| s.to_string()).collect())
                    ))?,
                ],
                names: Some("h{model.n_heads}-s{train.seed}".into()),
                lab: None,
            })
        };
        let spec = match &args.name {
            LabName::Heads { seeds, heads, .. } => grid(
                head_count::CONFIG,
                "configs/lab-heads.toml",
                heads
                    .clone()
                    .unwrap_or_else(|| head_count::HEAD_COUNTS.to_vec()),
                seeds.clone().unwrap_or_else(|| head_count::SEEDS.to_vec()),
            )?,
            LabName::Syntax { seeds, heads, .. } => grid(
                syntax::CONFIG,
                "configs/lab-syntax.toml",
                heads
                    .clone()
                    .unwrap_or_else(|| syntax::HEAD_COUNTS.to_vec()),
                seeds.clone().unwrap_or_else(|| syntax::SEEDS.to_vec()),
            )?,
            LabName::Relations { seeds, heads, .. } => grid(
                relations::CONFIG,
                "configs/lab-relations.toml",
                heads
                    .clone()
                    .unwrap_or_else(|| relations::HEAD_COUNTS.to_vec()),
                seeds.clone().unwrap_or_else(|| relations::SEEDS.to_vec()),
            )?,
            // Its runs differ in how they start, not in their config: the array's tasks
            // name them, and each trains its start as the lab would.
            LabName::Symmetry { .. } => {
                let toml_name = "configs/lab-symmetry.toml";
                let base = headlab_labs::lab_config(symmetry::CONFIG, toml_name, &sets)?;
                let runs: Vec<String> = symmetry::starts()
                    .into_iter()
                    .map(|(start, backend)| symmetry::run_name(start, &backend))
                    .collect();
                SweepSpec {
                    base_name: format!("lab {name} ({toml_name})"),
                    base: base.to_toml_string()?,
                    sets: Vec::new(),
                    axes: vec![parse_axis(&format!("{LAB_RUN}={}", list(runs)))?],
                    names: Some(format!("{{{LAB_RUN}}}")),
                    lab: Some(name.to_string()),
                }
            }
            _ => bail!(
                "--launcher slurm trains the runs of lab heads, lab syntax, lab relations and \
                 lab symmetry as a job array; lab {name} trains one run, or runs that depend on each other: \
                 run it here"
            ),
        };
        spec.check()?;
        if common.slurm.ranks() > 1 {
            bail!(
                "--ntasks: a lab trains each of its runs as one process; data-parallel runs are \
                 headlab train's and headlab sweep's (--launcher slurm --ntasks N)"
            );
        }
        if !common.slurm.dry_run && which("sbatch").is_none() {
            bail!(
                "--launcher slurm needs sbatch, which is not on PATH: run on a Slurm login node, \
                 or add --dry-run to write the script without submitting it"
            );
        }
        let made = in_use.made;
        spec.write(&out)?;
        drop(in_use);
        if let Err(e) = submit(&out, &common.slurm, None) {
            // A lab folder made for this submission leaves nothing behind.
            if made {
                std::fs::remove_dir_all(&out)
                    .with_context(|| format!("removing {}", out.display()))?;
            }
            return Err(e.context(format!(
                "nothing was submitted{}; fix the setting and run the command again",
                if made {
                    format!(", and {} was removed", out.display())
                } else {
                    String::new()
                }
            )));
        }
        eprintln!(
            "once every run is done, measure them and write the summary with: {resume_command}"
        );
        return Ok(());
    }
    let _in_use = in_use;
    let runs = Runs {
        observers: &observers,
        resume,
        resume_command: &resume_command,
        what: "lab",
    };
    let summary = match &args.name {
        LabName::Induction { .. } => induction::run(&out, &sets, &reproduce, runs)?,
        LabName::Heads { seeds, heads, .. } => {
            let seeds = seeds.clone().unwrap_or_else(|| head_count::SEEDS.to_vec());
            let counts = heads
                .clone()
                .unwrap_or_else(|| head_count::HEAD_COUNTS.to_vec());
            head_count::run(&out, &sets, seeds, &counts, &reproduce, runs)?
        }
        LabName::Syntax { seeds, heads, .. } => {
            let seeds = seeds.clone().unwrap_or_else(|| syntax::SEEDS.to_vec());
            let counts = heads
                .clone()
                .unwrap_or_else(|| syntax::HEAD_COUNTS.to_vec());
            syntax::run(&out, &sets, seeds, &counts, &reproduce, runs)?
        }
        LabName::Relations { seeds, heads, .. } => {
            let seeds = seeds.clone().unwrap_or_else(|| relations::SEEDS.to_vec());
            let counts = heads
                .clone()
                .unwrap_or_else(|| relations::HEAD_COUNTS.to_vec());
            relations::run(&out, &sets, seeds, &counts, &chosen, &reproduce, runs)?
        }
        LabName::Ambiguity { .. } => ambiguity::run(&out, &sets, &reproduce, runs)?,
        LabName::Symmetry { .. } => symmetry::run(&out, &sets, &reproduce, runs)?,
        LabName::Grokking { settings, .. } => grokking::run(&out, &settings.config(), &reproduce)?,
    };
    // A reader that went away (`headlab lab ... | head`) misses the summary, which is in
    // summary.md too; the lab's work is done and saved either way.
    let _ = writeln!(std::io::stdout(), "{summary}");
    headlab_train::log_line!("wrote {}", out.join("summary.md").display());
    Ok(())
}

/// A run in the lab folder `out` that another live process has marked, and that process.
fn busy_run(out: &Path) -> Option<(PathBuf, Holder)> {
    std::fs::read_dir(out).ok()?.flatten().find_map(|entry| {
        let holder = mark_holder(&entry.path())?;
        Some((entry.path(), holder))
    })
}

/// The lab's mark ([`mark_training`]) while it runs, so that a second lab refuses the folder;
/// `OUT` itself goes too if the lab made it and wrote nothing there (bad input found inside
/// the lab).
pub(crate) struct InUse {
    out: PathBuf,
    pub(crate) made: bool,
    mark: Option<TrainingMark>,
}

impl InUse {
    pub(crate) fn new(out: &Path, mark: TrainingMark) -> Result<Self> {
        let made = !out.exists();
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        // A stop request that ends the process at once skips `drop`: it removes them then.
        stop::remove_on_exit(mark.path());
        if made {
            stop::remove_on_exit(out);
        }
        Ok(Self {
            out: out.to_path_buf(),
            made,
            mark: Some(mark),
        })
    }
}

impl Drop for InUse {
    fn drop(&mut self) {
        stop::keep_on_exit(&self.out);
        let empty = std::fs::read_dir(&self.out).is_ok_and(|mut d| d.next().is_none());
        if self.made && empty {
            let _ = std::fs::remove_dir(&self.out);
        }
        // Released last: until here no other lab may take the folder.
        if let Some(mark) = self.mark.take() {
            stop::keep_on_exit(mark.path());
        }
    }
}

/// The command as typed, for the summary's "Reproduce" line: `headlab` and its arguments but
/// those in `leave_out`, each quoted for a POSIX shell where it needs to be.
pub(crate) fn command_line(leave_out: &[&str]) -> String {
    let quote = |a: String| {
        let plain = a
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c));
        if plain && !a.is_empty() {
            a
        } else {
            format!("'{}'", a.replace('\'', r"'\''"))
        }
    };
    std::iter::once("headlab".to_string())
        .chain(
            std::env::args()
                .skip(1)
                .filter(|a| !leave_out.contains(&a.as_str()))
                .map(quote),
        )
        .collect::<Vec<_>>()
        .join(" ")
}
