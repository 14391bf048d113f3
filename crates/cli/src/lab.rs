//! `headlab lab <name>`: experiments on head specialisation that anyone can rerun.
//!
//! - `induction`: a 2-layer attention-only model on the induction corpus forms the
//!   previous-token -> induction circuit of Olsson et al. 2022, with a visible phase change.
//! - `heads`: equal d_model and parameter count with 1..16 heads, several seeds, on grammar.
//! - `ambiguity`: where "with" looks in "the detective follows the spy with binoculars".
//!
//! Each lab writes its runs, pictures and a `summary.md` into its output directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};

use burn::tensor::Device;
use headlab_data::Dataset;
use headlab_data::corpus::{SentenceKind, grammar_sentences};
use headlab_heads::analysis::{mean_patterns, pattern_scores};
use headlab_heads::scores::label;
use headlab_heads::{HISTORY_FILE, HeadHistory, HeadReport, Probe, find_circuit, head_report};
use headlab_report::{to_table, write_head_report};
use headlab_train::backend::Backend;
use headlab_train::config::RunConfig;
use headlab_train::run::Trained;
use headlab_train::trainer::{TrainOptions, TrainSummary, load_dataset, train};

use crate::common::{Checkpoint, observers, open_run};

/// The shipped lab configs, embedded so `headlab lab` works from any folder.
pub const INDUCTION_CONFIG: &str = include_str!("../../../configs/lab-induction.toml");
/// See [`INDUCTION_CONFIG`].
pub const HEADS_CONFIG: &str = include_str!("../../../configs/lab-heads.toml");
/// See [`INDUCTION_CONFIG`].
pub const AMBIGUITY_CONFIG: &str = include_str!("../../../configs/lab-ambiguity.toml");

/// Which experiment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LabName {
    /// The induction-head phase change.
    Induction,
    /// One head vs many at equal parameters.
    Heads,
    /// Prepositional-phrase attachment.
    Ambiguity,
}

/// `headlab lab`.
#[derive(Debug, Args)]
pub struct LabArgs {
    /// The experiment.
    #[arg(value_enum)]
    pub name: LabName,
    /// Output directory (default: runs/lab-<name>).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Overwrite the output directory if it exists.
    #[arg(long)]
    pub force: bool,
    /// Override a config key of the lab's runs (repeatable), e.g. --set train.max_iters=300.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Backend of the lab's runs: flex, ndarray or wgpu (overrides train.backend).
    #[arg(long, short)]
    pub backend: Option<String>,
    /// Seeds for `lab heads` (comma-separated; default 1,2,3).
    #[arg(long, value_delimiter = ',')]
    pub seeds: Option<Vec<u64>>,
    /// Head counts for `lab heads` (comma-separated; default 1,2,4,8,16).
    #[arg(long, value_delimiter = ',')]
    pub heads: Option<Vec<usize>>,
}

impl LabArgs {
    /// `--set`s with `--backend` as one more.
    fn sets(&self) -> Result<Vec<String>> {
        let mut sets = self.set.clone();
        if let Some(backend) = &self.backend {
            backend.parse::<Backend>()?;
            sets.push(format!("train.backend={backend}"));
        }
        Ok(sets)
    }
}

/// Runs the lab.
pub fn run(args: LabArgs) -> Result<()> {
    let name = match args.name {
        LabName::Induction => "induction",
        LabName::Heads => "heads",
        LabName::Ambiguity => "ambiguity",
    };
    if args.name != LabName::Heads && (args.seeds.is_some() || args.heads.is_some()) {
        bail!("--seeds and --heads are for `lab heads`; `lab {name}` takes --set train.seed=N");
    }
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| Path::new("runs").join(format!("lab-{name}")));
    if out.exists() {
        if !args.force {
            bail!(
                "{} already exists; choose another --out or pass --force",
                out.display()
            );
        }
        std::fs::remove_dir_all(&out).with_context(|| format!("removing {}", out.display()))?;
    }
    let summary = match args.name {
        LabName::Induction => induction(&args, &out)?,
        LabName::Heads => heads(&args, &out)?,
        LabName::Ambiguity => ambiguity(&args, &out)?,
    };
    std::fs::write(out.join("summary.md"), &summary).context("writing summary.md")?;
    println!("{summary}");
    eprintln!("wrote {}", out.join("summary.md").display());
    Ok(())
}

fn config(base: &str, name: &str, sets: &[String]) -> Result<RunConfig> {
    let mut config = RunConfig::from_toml_str(base, name)?;
    config.apply_sets(sets)?;
    config.validate()?;
    Ok(config)
}

fn train_run(config: RunConfig, out: PathBuf) -> Result<TrainSummary> {
    let options = TrainOptions {
        config,
        out,
        force: true,
        resume: false,
        resume_sets: Vec::new(),
        print_sample: false,
    };
    Ok(train(options, &mut observers())?)
}

/// The best checkpoint of a finished run on its own backend, with its data.
fn open(run_dir: &Path) -> Result<(Trained, Device, Dataset)> {
    let (_, trained, device) = open_run(run_dir, None, Checkpoint::Best)?;
    let data = load_dataset(&trained.config, trained.tokenizer.clone())?;
    Ok((trained, device, data))
}

/// Analyses a lab's model, writes its head files into `out` and returns the report.
fn write_heads(
    out: &Path,
    title: &str,
    trained: &Trained,
    probe: &Probe,
    map_ids: &[u32],
    device: &Device,
) -> Result<HeadReport> {
    let report = head_report(&trained.model, &trained.tokenizer, probe, map_ids, device);
    write_head_report(out, title, &report)?;
    Ok(report)
}

fn induction(args: &LabArgs, out: &Path) -> Result<String> {
    let config = config(
        INDUCTION_CONFIG,
        "configs/lab-induction.toml",
        &args.sets()?,
    )?;
    let run_dir = out.join("run");
    let started = std::time::Instant::now();
    train_run(config.clone(), run_dir.clone())?;
    let seconds = started.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(run_dir.join(HISTORY_FILE))
        .with_context(|| format!("reading {HISTORY_FILE}"))?;
    let history = HeadHistory::parse(&text, usize::MAX);
    let circuit = find_circuit(&history).context("the run tracked no head scores")?;
    let (trained, device, data) = open(&run_dir)?;
    let (cfg, tokenizer) = (&trained.config, &trained.tokenizer);
    let probe = Probe::new(
        &data,
        cfg.model.block_size,
        tokenizer.vocab_size(),
        None,
        cfg.train.seed,
    )?;
    let map_ids: Vec<u32> = probe.repeated[..probe.repeated_len().min(33)].to_vec();
    let title = "headlab lab induction";
    let report = write_heads(out, title, &trained, &probe, &map_ids, &device)?;
    std::fs::copy(run_dir.join("heads.png"), out.join("heads.png")).context("copying heads.png")?;
    std::fs::copy(run_dir.join("loss.png"), out.join("loss.png")).context("copying loss.png")?;

    let c = &circuit;
    let mut s = String::new();
    writeln!(s, "# lab induction\n")?;
    writeln!(
        s,
        "A {}-layer attention-only model (d_model {}, {} heads, {} positions) trained for {} steps \
         on the built-in induction corpus (random runs over 62 symbols, each written twice), seed {}, in {:.0} s. Layers and heads count from 0: layer 1 is the second layer.\n",
        cfg.model.n_layers,
        cfg.model.d_model,
        cfg.model.n_heads,
        cfg.model.block_size,
        cfg.train.max_iters,
        cfg.train.seed,
        seconds
    )?;
    writeln!(
        s,
        "- **induction head**: layer {} head {}, induction score {:.2}{}",
        c.induction_head.0,
        c.induction_head.1,
        c.induction_score,
        c.crossed_at
            .map_or(" (never above 0.5)".to_string(), |st| format!(
                ", above 0.5 from step {st}"
            ))
    )?;
    writeln!(
        s,
        "- **previous-token head**: layer {} head {}, previous-token score {:.2}",
        c.previous_token_head.0, c.previous_token_head.1, c.previous_token_score
    )?;
    writeln!(
        s,
        "- **loss on the repeated half**: {:.2} at step 0, {:.2} at the end; steepest fall {:.2} nats in the interval ending at step {}",
        c.repeat_loss.0, c.repeat_loss.1, c.steepest_drop.0, c.steepest_drop.1
    )?;
    let formed = c.induction_score > 0.5 && c.previous_token_score > 0.5;
    writeln!(
        s,
        "\n{}\n",
        if formed {
            "The circuit formed: a first-layer head copies each token's predecessor into its position, and a second-layer head uses it to find the token after the earlier occurrence of the current token."
        } else {
            "No complete circuit formed at these settings (see the scores above)."
        }
    )?;
    writeln!(
        s,
        "![head scores](heads.png)\n\n![attention maps on a repeated sequence](attention.png)\n"
    )?;
    writeln!(
        s,
        "Head table (`heads.csv`, explorer: `heads.html`):\n\n```\n{}```",
        to_table(&report.rows)
    )?;
    writeln!(s, "\nReproduce: `headlab lab induction`")?;
    Ok(s)
}

fn heads(args: &LabArgs, out: &Path) -> Result<String> {
    let base = config(HEADS_CONFIG, "configs/lab-heads.toml", &args.sets()?)?;
    let seeds = args.seeds.clone().unwrap_or_else(|| vec![1, 2, 3]);
    let head_counts = args.heads.clone().unwrap_or_else(|| vec![1, 2, 4, 8, 16]);
    let d_model = base.model.d_model;
    let mut s = String::new();
    writeln!(s, "# lab heads\n")?;
    writeln!(
        s,
        "Same d_model ({d_model}), layers ({}) and parameter count, different numbers of heads, \
         {} steps each on the grammar corpus, seeds {:?}. Final val loss (mean and spread \
         across seeds) and the head labels of each run.\n",
        base.model.n_layers, base.train.max_iters, seeds
    )?;
    writeln!(
        s,
        "| heads | d_k | parameters | val loss mean | min | max | head labels (all seeds) |"
    )?;
    writeln!(s, "|---|---|---|---|---|---|---|")?;
    let mut csv = String::from("n_heads,seed,val_loss\n");
    for &h in &head_counts {
        if h == 0 || d_model % h != 0 {
            bail!("--heads {h} does not divide d_model = {d_model}");
        }
        let mut losses = Vec::new();
        let mut labels = std::collections::BTreeMap::<String, usize>::new();
        let mut params = 0;
        for &seed in &seeds {
            let mut config = base.clone();
            config.model.n_heads = h;
            config.train.seed = seed;
            let dir = out.join(format!("h{h}-s{seed}"));
            let summary = train_run(config, dir.clone())?;
            losses.push(summary.val_loss);
            writeln!(csv, "{h},{seed},{:.5}", summary.val_loss)?;
            let (trained, device, data) = open(&dir)?;
            let (cfg, tokenizer, model) = (&trained.config, &trained.tokenizer, &trained.model);
            params = burn::module::Module::num_params(model);
            let probe = Probe::new(
                &data,
                cfg.model.block_size,
                tokenizer.vocab_size(),
                None,
                seed,
            )?;
            let (scores, _) = pattern_scores(model, &probe, &device);
            for p in scores {
                let l = label(
                    p.induction,
                    p.previous_token,
                    p.first_token,
                    p.mean_distance,
                    cfg.model.block_size,
                );
                *labels.entry(l.to_string()).or_default() += 1;
            }
        }
        let mean = losses.iter().sum::<f64>() / losses.len() as f64;
        let (min, max) = losses
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(
            s,
            "| {h} | {} | {params} | {mean:.4} | {min:.4} | {max:.4} | {} |",
            d_model / h,
            labels.join(", ")
        )?;
    }
    std::fs::write(out.join("val_loss.csv"), csv).context("writing val_loss.csv")?;
    writeln!(
        s,
        "\nReproduce: `headlab lab heads` (per-run directories `h<heads>-s<seed>/` hold curves and checkpoints)."
    )?;
    Ok(s)
}

fn ambiguity(args: &LabArgs, out: &Path) -> Result<String> {
    let config = config(
        AMBIGUITY_CONFIG,
        "configs/lab-ambiguity.toml",
        &args.sets()?,
    )?;
    let run_dir = out.join("run");
    train_run(config, run_dir.clone())?;
    let (trained, device, data) = open(&run_dir)?;
    let (cfg, tokenizer, model) = (&trained.config, &trained.tokenizer, &trained.model);
    let sentences: Vec<_> = grammar_sentences(cfg.train.seed.wrapping_add(99), 20_000)
        .into_iter()
        .filter(|s| s.kind == SentenceKind::AttachmentAmbiguity)
        .take(50)
        .collect();
    if sentences.is_empty() {
        bail!("the grammar generator produced no attachment sentences");
    }
    let (layers, heads) = (cfg.model.n_layers, cfg.model.n_heads);
    // Attention mass from the last character of "with" to the verb's and the object's characters.
    let mut to_verb = vec![0.0f64; layers * heads];
    let mut to_noun = vec![0.0f64; layers * heads];
    let mut example = None;
    for sentence in &sentences {
        let text = format!(". {}", sentence.text);
        let words: Vec<&str> = sentence.text.split(' ').collect();
        let with = words
            .iter()
            .position(|w| *w == "with")
            .context("an attachment sentence without `with`")?;
        let span = |word: usize| {
            let start = 2 + words[..word].iter().map(|w| w.len() + 1).sum::<usize>();
            start..start + words[word].len()
        };
        let (verb, noun, with_end) = (span(sentence.main_verb), span(with - 1), span(with).end - 1);
        let ids = tokenizer.encode(&text)?;
        if ids.len() > cfg.model.block_size || ids.len() != text.chars().count() {
            continue;
        }
        let t = ids.len();
        let maps = mean_patterns(model, &ids, 1, t, &device);
        for l in 0..layers {
            for h in 0..heads {
                let a = &maps[l][h];
                to_verb[l * heads + h] += verb
                    .clone()
                    .map(|j| a[with_end * t + j] as f64)
                    .sum::<f64>();
                to_noun[l * heads + h] += noun
                    .clone()
                    .map(|j| a[with_end * t + j] as f64)
                    .sum::<f64>();
            }
        }
        example.get_or_insert(ids);
    }
    let n = sentences.len() as f64;
    let example = example.context("no attachment sentence fits the context")?;
    let probe = Probe::new(
        &data,
        cfg.model.block_size,
        tokenizer.vocab_size(),
        Some(example.clone()),
        cfg.train.seed,
    )?;
    write_heads(
        out,
        "headlab lab ambiguity",
        &trained,
        &probe,
        &example,
        &device,
    )?;

    let mut s = String::new();
    writeln!(s, "# lab ambiguity\n")?;
    writeln!(
        s,
        "{} A {}-layer, {}-head char-level model trained on the grammar corpus; attention from the last letter of \"with\" to the letters of the verb and of the object noun, averaged over {} such sentences.\n",
        readings(&sentences[0].text, sentences[0].main_verb),
        layers,
        heads,
        sentences.len()
    )?;
    writeln!(s, "| layer | head | to verb | to noun | attaches to |")?;
    writeln!(s, "|---|---|---|---|---|")?;
    for l in 0..layers {
        for h in 0..heads {
            let (v, o) = (to_verb[l * heads + h] / n, to_noun[l * heads + h] / n);
            let side = if (v - o).abs() < 0.05 {
                "neither"
            } else if v > o {
                "verb"
            } else {
                "noun"
            };
            writeln!(s, "| {l} | {h} | {v:.3} | {o:.3} | {side} |")?;
        }
    }
    writeln!(
        s,
        "\nBoth readings fit every such sentence; the table shows which side each head reads from when the model is at \"with\".\n"
    )?;
    writeln!(
        s,
        "![attention on an example sentence](attention.png)\n\nReproduce: `headlab lab ambiguity`"
    )?;
    Ok(s)
}

/// The question an attachment sentence poses, in its own words: "with X" as the verb's
/// instrument or as the noun's possession.
fn readings(sentence: &str, main_verb: usize) -> String {
    let words: Vec<&str> = sentence.trim_end_matches('.').split(' ').collect();
    let Some(with) = words.iter().position(|w| *w == "with") else {
        return format!("In \"{sentence}\", where does the prepositional phrase attach?");
    };
    let (verb, noun, object) = (
        words[main_verb],
        words[with - 1],
        words[with + 1..].join(" "),
    );
    format!(
        "In \"{sentence}\", does \"with {object}\" attach to the verb (an instrument: {verb} \
         using {object}) or to the noun (the {noun} with {object})?"
    )
}

#[cfg(test)]
mod tests {
    use super::readings;

    #[test]
    fn the_readings_quote_the_measured_sentence() {
        let text = readings("the cat watches the tall children with a camera.", 2);
        assert_eq!(
            text,
            "In \"the cat watches the tall children with a camera.\", does \"with a camera\" \
             attach to the verb (an instrument: watches using a camera) or to the noun (the \
             children with a camera)?"
        );
    }
}
