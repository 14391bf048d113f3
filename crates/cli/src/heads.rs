//! `headlab heads`.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::Args;
use headlab_data::{Dataset, Split, read_text};
use headlab_heads::{HeadReport, Probe, head_report};
use headlab_report::{to_table, write_head_report};
use headlab_train::trainer::load_dataset;

use crate::common::{OnRun, open_run};
use headlab_heads::syntax_report::SyntaxReport;

/// `headlab heads`.
#[derive(Debug, Args)]
pub struct HeadsArgs {
    /// A run directory made by `headlab train`.
    pub run: PathBuf,
    /// Text whose attention maps are drawn (default: the start of the val split), and on which
    /// the text scores are read (previous-token, first-token, distance, entropy; default: 8
    /// val windows). Ablation, importance and the repeated-sequence scores do not depend on
    /// it: they use the run's held-out val batches and seeded random sequences.
    #[arg(long, conflicts_with = "file")]
    pub text: Option<String>,
    /// Read that text from a file.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Where to write heads.csv, heads.json, composition.csv, detector.csv, attention.png and
    /// heads.html, and for a run on the built-in grammar corpus syntax.csv, agreement.csv,
    /// syntax.json and syntax.txt (default: RUN/heads). The syntactic scores are read on the
    /// start of the val split, whatever --text says.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// The backend and checkpoint to load.
    #[command(flatten)]
    pub on: OnRun,
}

/// Runs `headlab heads`.
pub fn run(args: HeadsArgs) -> Result<()> {
    if args.out.is_none() && args.run.join("heads/heads.csv").is_file() {
        eprintln!(
            "note: replacing the head table in {} (training wrote it for its last \
             checkpoint); -o DIR writes elsewhere",
            args.run.join("heads").display()
        );
    }
    let (out, report, syntax) = write(&args, None)?;
    print!("{}", to_table(&report.rows));
    let syntax_files = match &syntax {
        Some(syntax) => {
            eprint!("{}", headlab_heads::syntax_report::summary(syntax));
            format!(
                ", {}, {}, {}, {}",
                headlab_heads::syntax_report::SYNTAX_FILE,
                headlab_heads::syntax_report::AGREEMENT_FILE,
                headlab_heads::syntax_report::JSON_FILE,
                headlab_heads::syntax_report::TEXT_FILE
            )
        }
        None => String::new(),
    };
    eprintln!(
        "wrote {0}/heads.csv, heads.json, composition.csv, detector.csv, attention.png{syntax_files} \
         and heads.html (open it in a browser)",
        out.display()
    );
    Ok(())
}

/// The head table of the run `args` name: where it was written, and what it holds. `data` is
/// the run's dataset when the caller has it (training does), saving a second read and
/// tokenization of its text. On a run on the built-in grammar corpus, also its syntactic
/// heads ([`headlab_heads::syntax_report::measure`]); a failure there is a note, not an error.
pub fn write(
    args: &HeadsArgs,
    data: Option<Dataset>,
) -> Result<(PathBuf, HeadReport, Option<SyntaxReport>)> {
    let (run, trained, device) =
        open_run(&args.run, args.on.backend.as_deref(), args.on.checkpoint)?;
    let (config, tokenizer, model) = (trained.config, trained.tokenizer, trained.model);
    let text = match (&args.text, &args.file) {
        (Some(text), _) => Some(text.clone()),
        (None, Some(path)) => Some(read_text(path).context("--file")?),
        (None, None) => None,
    };
    // With a text of its own the analysis can go on without the run's data (moved or gone):
    // everything but ablation and importance, which need held-out batches.
    let loaded = match data {
        Some(data) => Ok(data),
        None => load_dataset(&run, &config, tokenizer.clone()),
    };
    let data = match loaded {
        Ok(data) => Some(data),
        Err(e) if text.is_some() => {
            // An imported model never had training text here; anything else lost its data.
            let why = if run.is_imported() && config.data.source().is_err() {
                "this run was imported and has no training text".to_string()
            } else {
                e.to_string()
            };
            eprintln!(
                "note: {why}; going on without the run's data: the maps and pattern scores use \
                 your text and random sequences, ablation and importance are skipped (NaN)"
            );
            None
        }
        Err(e) => {
            return Err(anyhow::Error::new(e)).context(
                "the head table needs the run's data for its held-out batches; give --text or \
                 --file to analyse heads on a text of your own without it",
            );
        }
    };
    let block = config.model.block_size;
    if block < 3 {
        bail!(
            "head analysis needs model.block_size >= 3 (a token and two copies of another); this run has {block}"
        );
    }
    let map_ids = match (&text, &data) {
        (Some(text), _) => {
            let ids = tokenizer
                .encode(text)
                .context("encoding the text for the attention maps")?;
            if ids.len() < 2 {
                bail!("the text has {} tokens; give at least 2", ids.len());
            }
            if ids.len() > block {
                eprintln!(
                    "note: the text has {} tokens; the maps show its first {block} \
                     (model.block_size, the longest context the model has)",
                    ids.len()
                );
            }
            ids[..ids.len().min(block)].to_vec()
        }
        (None, Some(data)) => data.tokens(Split::Val).to_vec(0..block.min(32)),
        (None, None) => bail!("no text and no data to analyse heads on"),
    };
    let probe = match &data {
        Some(data) => Probe::new(
            data,
            block,
            tokenizer.vocab_size(),
            text.as_ref().map(|_| map_ids.clone()),
            config.train.seed,
        )?,
        None => Probe::from_text(
            block,
            tokenizer.vocab_size(),
            map_ids.clone(),
            config.train.seed,
        ),
    };
    let out = args.out.clone().unwrap_or_else(|| run.root.join("heads"));
    let title = format!("headlab heads: {}", run.root.display());
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let mut report = head_report(&model, &tokenizer, &probe, &map_ids, &device);
    let syntax = match &data {
        Some(data) => {
            headlab_heads::syntax_report::measure(&config, data, &tokenizer, &model, &device, &out)
                .unwrap_or_else(|e| {
                    eprintln!("note: the syntactic head scores were not made: {e:#}");
                    None
                })
        }
        None => None,
    };
    // The table's roles column: each head's syntactic roles on the val sentences.
    if let Some(syntax) = &syntax {
        syntax.mark_roles(&mut report.rows);
    }
    let relations = syntax
        .as_ref()
        .map(headlab_heads::syntax_report::syntax_json);
    write_head_report(&out, &title, &report, relations.as_ref())?;
    Ok((out, report, syntax))
}
