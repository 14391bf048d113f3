//! `headlab prune`: heads removed one at a time in order of importance, against reverse and
//! random orders ([`headlab_heads::pruning`]).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use headlab_data::BuiltinCorpus;
use headlab_heads::Probe;
use headlab_heads::prune_report::{prune_csv, prune_json, summary};
use headlab_heads::pruning::{Order, PruneError, prune_curve};
use headlab_heads::syntax::{MAX_SENTENCES, val_probe};
use headlab_report::plot::{Series, line_chart};
use headlab_report::report_run;
use headlab_train::trainer::load_dataset;

use crate::common::{OnRun, open_run, whole_number};

/// `headlab prune`.
#[derive(Debug, Args)]
pub struct PruneArgs {
    /// A run directory made by `headlab train`.
    pub run: PathBuf,
    /// Seeds of the random orders, the baseline (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,3", allow_negative_numbers = true, value_parser = whole_number::<u64>)]
    pub seeds: Vec<u64>,
    /// Where to write prune.csv, prune.json, prune.png (and agreement.png on a grammar run)
    /// and summary.txt (default: RUN/prune, which the run's page, report.html, shows).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// The backend and checkpoint to load.
    #[command(flatten)]
    pub on: OnRun,
}

/// Runs `headlab prune`.
pub fn run(args: PruneArgs) -> Result<()> {
    let (run, trained, device) =
        open_run(&args.run, args.on.backend.as_deref(), args.on.checkpoint)?;
    let (config, tokenizer, model) = (trained.config, trained.tokenizer, trained.model);
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    if n_layers * n_heads < 2 {
        return Err(PruneError::OneHead { n_layers, n_heads }.into());
    }
    let data = load_dataset(&run, &config, tokenizer.clone())
        .context("pruning measures the loss on the run's val split")?;
    let block = config.model.block_size;
    let probe = Probe::new(
        &data,
        block,
        tokenizer.vocab_size(),
        None,
        config.train.seed,
    )?;
    let grammar = config.data.builtin.as_deref() == Some(BuiltinCorpus::Grammar.name());
    let syntax = if grammar {
        val_probe(&data, &tokenizer, MAX_SENTENCES)?.map(|(p, _)| p)
    } else {
        None
    };
    let mut orders = vec![Order::Importance, Order::Reverse];
    orders.extend(args.seeds.iter().map(|&s| Order::Random(s)));
    let mut curves = Vec::new();
    for order in orders {
        headlab_train::log_line!(
            "prune: {} order, {} heads",
            order.name(),
            n_layers * n_heads
        );
        let with = syntax.as_ref().map(|p| (&tokenizer, p));
        curves.push(prune_curve(&model, &probe, with, order, &device)?);
    }
    let out = args.out.clone().unwrap_or_else(|| run.root.join("prune"));
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let write = |name: &str, text: String| {
        let path = out.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write("prune.csv", prune_csv(&curves))?;
    write("prune.json", prune_json(&curves).to_string())?;
    let text = summary(&curves);
    write("summary.txt", text.clone())?;
    let series = |f: &dyn Fn(&headlab_heads::pruning::PruneStep) -> Option<f64>| -> Vec<Series> {
        curves
            .iter()
            .map(|c| Series {
                label: c.order.name(),
                points: c
                    .steps
                    .iter()
                    .enumerate()
                    .filter_map(|(k, s)| f(s).map(|v| (k as f64, v)))
                    .collect(),
                faint: matches!(c.order, Order::Random(_)),
            })
            .collect()
    };
    line_chart(
        &out.join("prune.png"),
        "val loss as heads are removed, by order of removal",
        "heads removed",
        "val loss",
        &series(&|s| Some(s.val_loss)),
    )?;
    if syntax.is_some() {
        line_chart(
            &out.join("agreement.png"),
            "forced-choice agreement as heads are removed (0.5 is chance)",
            "heads removed",
            "agreement",
            &series(&|s| s.agreement),
        )?;
    }
    print!("{text}");
    eprintln!(
        "wrote prune.csv, prune.json, prune.png and summary.txt in {}",
        out.display()
    );
    // The run's page shows the curves kept in RUN/prune.
    if out == run.root.join("prune") {
        let page = report_run(&run.root)?;
        eprintln!("updated {}", page.path.display());
    }
    Ok(())
}
