//! The labs' experiments, as data: each trains its runs and measures them; `headlab-report`
//! writes the summaries and the CLI the files.
//!
//! - [`induction`]: a 2-layer attention-only model on the induction corpus forms the
//!   previous-token -> induction circuit of Olsson et al. 2022, with a visible phase change.
//! - [`heads`]: equal d_model and parameter count with 1..64 heads, several seeds, on the
//!   two-lookup `lookup` corpus, with which head fetches which source ([`lookup_probe`]).
//! - [`ambiguity`]: where "with" looks in "the detective follows the spy with binoculars".

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_data::corpus::{
    GrammarSentence, LOOKUP_ALPHABET, LOOKUP_FAR, LOOKUP_NEAR, SentenceKind, grammar_sentences,
    lookup_rule,
};
use headlab_data::{DataError, Dataset, Split, Tokenizer, TokenizerError};
use headlab_model::{ForwardOptions, Gpt};
use headlab_train::config::RunConfig;
use headlab_train::run::{OpenError, Trained, open_trained};
use headlab_train::trainer::{Observer, TrainError, TrainOptions, load_dataset, train};
use thiserror::Error;

use crate::analysis::{HeadReport, Probe, head_report, mean_patterns, pattern_scores};
use crate::history::{Circuit, HeadHistory, find_circuit};
use crate::scores::label;
use crate::tracker::HISTORY_FILE;

/// Why a lab could not finish.
#[derive(Debug, Error)]
pub enum LabError {
    /// Training one of its runs (boxed: a `TrainError` is large).
    #[error(transparent)]
    Train(Box<TrainError>),
    /// Opening a finished run.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// Its data.
    #[error(transparent)]
    Data(#[from] DataError),
    /// Encoding a probe sentence.
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    /// Reading the tracked history.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The runs did not give what the lab measures.
    #[error("{0}")]
    Nothing(String),
}

impl From<TrainError> for LabError {
    fn from(e: TrainError) -> Self {
        Self::Train(Box::new(e))
    }
}

/// Makes the observers of each training run (head tracking, plots).
pub type Observers<'a> = &'a dyn Fn() -> Vec<Box<dyn Observer>>;

/// Trains `config` into `dir` (replacing it).
fn train_run(config: RunConfig, dir: PathBuf, observers: Observers<'_>) -> Result<f64, LabError> {
    let options = TrainOptions {
        config,
        out: dir,
        force: true,
        resume: false,
        resume_sets: Vec::new(),
        print_sample: false,
    };
    Ok(train(options, &mut observers())?.val_loss)
}

/// The best checkpoint of a finished run on its own backend, with its data.
fn open(dir: &Path) -> Result<(Trained, Device, Dataset), LabError> {
    let (run, trained, device) = open_trained(dir, None, "best")?;
    let data = load_dataset(&run, &trained.config, trained.tokenizer.clone())?;
    Ok((trained, device, data))
}

/// What `lab induction` measured.
#[derive(Debug, Clone)]
pub struct InductionLab {
    /// The run's config.
    pub config: RunConfig,
    /// Training time.
    pub seconds: f64,
    /// The circuit read from the tracked scores.
    pub circuit: Circuit,
    /// The final head table and the maps of a repeated sequence.
    pub report: HeadReport,
}

/// Trains the induction run into `dir/run` and reads the circuit out of it.
pub fn induction(
    config: RunConfig,
    dir: &Path,
    observers: Observers<'_>,
) -> Result<InductionLab, LabError> {
    let run_dir = dir.join("run");
    let started = Instant::now();
    train_run(config, run_dir.clone(), observers)?;
    let seconds = started.elapsed().as_secs_f64();
    let path = run_dir.join(HISTORY_FILE);
    let text = std::fs::read_to_string(&path).map_err(|source| LabError::Read {
        path: path.clone(),
        source,
    })?;
    let circuit = find_circuit(&HeadHistory::parse(&text, usize::MAX))
        .ok_or_else(|| LabError::Nothing("the run tracked no head scores".into()))?;
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
    let report = head_report(&trained.model, tokenizer, &probe, &map_ids, &device);
    Ok(InductionLab {
        config: trained.config,
        seconds,
        circuit,
        report,
    })
}

/// One head count of `lab heads`, over its seeds.
#[derive(Debug, Clone)]
pub struct HeadCount {
    /// Heads per layer.
    pub n_heads: usize,
    /// `d_model / n_heads`.
    pub d_k: usize,
    /// Parameters of each run (equal for every head count).
    pub params: usize,
    /// Final val loss per seed, in seed order.
    pub val_losses: Vec<f64>,
    /// How many heads got each label, over all seeds.
    pub labels: BTreeMap<String, usize>,
    /// On the lookup corpus, each seed's run measured by [`lookup_probe`], in seed order
    /// (empty on other corpora).
    pub lookups: Vec<LookupProbe>,
}

/// A run on the `lookup` corpus, measured on its val split: how often it predicts the rule's
/// letter, and which heads fetch which source.
#[derive(Debug, Clone, PartialEq)]
pub struct LookupProbe {
    /// Predictions measured: positions whose next letter has both sources in the window.
    pub predictions: usize,
    /// Share of them whose most likely letter is the rule's (noise letters included: the
    /// rule's letter is the best guess there too).
    pub accuracy: f64,
    /// Per head (`layer * n_heads + head`): mean attention from those positions to the near
    /// source, `LOOKUP_NEAR - 1` tokens back.
    pub to_near: Vec<f64>,
    /// The same to the far source, `LOOKUP_FAR - 1` tokens back.
    pub to_far: Vec<f64>,
    /// Per head: the accuracy with that head's output zeroed.
    pub ablated: Vec<f64>,
}

/// Val windows `[n, block]` of a lookup run: at most 64, end to end from the split's start.
fn lookup_windows(data: &Dataset, block: usize) -> (Vec<u32>, usize) {
    let tokens = data.tokens(Split::Val);
    let n = (tokens.len() / block).min(64);
    (tokens[..n * block].to_vec(), n)
}

/// Measures a model trained on the `lookup` corpus (`None` when its vocabulary is not the
/// corpus's letters): every position from `LOOKUP_FAR - 1` on predicts a letter whose two
/// sources lie in the window.
pub fn lookup_probe(
    model: &Gpt,
    tokenizer: &Tokenizer,
    data: &Dataset,
    block: usize,
    device: &Device,
) -> Option<LookupProbe> {
    // Token id -> letter index, for every id.
    let letter: Vec<u8> = (0..tokenizer.vocab_size() as u32)
        .map(|id| {
            let text = tokenizer.decode(&[id]);
            LOOKUP_ALPHABET
                .iter()
                .position(|&a| text.as_bytes() == [a])
                .map(|i| i as u8)
        })
        .collect::<Option<_>>()?;
    let (ids, n) = lookup_windows(data, block);
    if n == 0 || block <= LOOKUP_FAR {
        return None;
    }
    let c = &model.config;
    let (layers, heads, vocab) = (c.n_layers, c.n_heads, c.vocab_size);
    let input = Tensor::<2, Int>::from_data(
        TensorData::new(
            ids.iter().map(|&i| i64::from(i)).collect::<Vec<_>>(),
            [n, block],
        ),
        device,
    );
    // Query p predicts p + 1, whose sources are p + 1 - NEAR and p + 1 - FAR.
    let queries = || (0..n).flat_map(|w| (LOOKUP_FAR - 1..block - 1).map(move |p| (w, p)));
    let rule = |w: usize, p: usize| {
        let at = |q: usize| letter[ids[w * block + q] as usize];
        lookup_rule(at(p + 1 - LOOKUP_NEAR), at(p + 1 - LOOKUP_FAR))
    };
    let accuracy = |logits: Tensor<3>| {
        let logits = logits
            .into_data()
            .try_into_vec_as::<f32>()
            .expect("f32 logits");
        let mut hits = 0usize;
        for (w, p) in queries() {
            let row = &logits[(w * block + p) * vocab..(w * block + p + 1) * vocab];
            let best = (0..vocab).fold(0, |b, v| if row[v] > row[b] { v } else { b });
            hits += usize::from(letter[best] == rule(w, p));
        }
        hits as f64 / queries().count() as f64
    };
    let out = model.forward_with(
        input.clone(),
        ForwardOptions {
            return_weights: true,
            ..ForwardOptions::default()
        },
    );
    let (mut to_near, mut to_far) = (vec![0.0; layers * heads], vec![0.0; layers * heads]);
    for (l, weights) in out.weights.into_iter().enumerate() {
        // [n, h, t, t]
        let a = weights
            .into_data()
            .try_into_vec_as::<f32>()
            .expect("f32 weights");
        for h in 0..heads {
            for (w, p) in queries() {
                let row = ((w * heads + h) * block + p) * block;
                to_near[l * heads + h] += f64::from(a[row + p + 1 - LOOKUP_NEAR]);
                to_far[l * heads + h] += f64::from(a[row + p + 1 - LOOKUP_FAR]);
            }
        }
    }
    let count = queries().count() as f64;
    to_near
        .iter_mut()
        .chain(&mut to_far)
        .for_each(|v| *v /= count);
    let accuracy_all = accuracy(out.logits);
    let ablated = (0..layers * heads)
        .map(|k| {
            let mut mask = vec![1.0f32; layers * heads];
            mask[k] = 0.0;
            let mask = Tensor::<2>::from_data(TensorData::new(mask, [layers, heads]), device);
            let options = ForwardOptions {
                head_mask: Some(mask),
                ..ForwardOptions::default()
            };
            accuracy(model.forward_with(input.clone(), options).logits)
        })
        .collect();
    Some(LookupProbe {
        predictions: queries().count(),
        accuracy: accuracy_all,
        to_near,
        to_far,
        ablated,
    })
}

/// What `lab heads` measured.
#[derive(Debug, Clone)]
pub struct HeadsLab {
    /// The config every run starts from.
    pub base: RunConfig,
    /// The seeds, in order.
    pub seeds: Vec<u64>,
    /// One row per head count.
    pub counts: Vec<HeadCount>,
}

/// Trains `base` with each of `head_counts` and `seeds` into `dir/h<heads>-s<seed>`.
pub fn heads(
    base: RunConfig,
    seeds: Vec<u64>,
    head_counts: &[usize],
    dir: &Path,
    observers: Observers<'_>,
) -> Result<HeadsLab, LabError> {
    let d_model = base.model.d_model;
    let started = Instant::now();
    let mut counts = Vec::new();
    for &h in head_counts {
        if h == 0 || !d_model.is_multiple_of(h) {
            return Err(LabError::Nothing(format!(
                "--heads {h} does not divide d_model = {d_model}; choose among {:?}",
                (1..=d_model)
                    .filter(|k| d_model.is_multiple_of(*k))
                    .collect::<Vec<_>>()
            )));
        }
        let mut count = HeadCount {
            n_heads: h,
            d_k: d_model / h,
            params: 0,
            val_losses: Vec::new(),
            labels: BTreeMap::new(),
            lookups: Vec::new(),
        };
        for &seed in &seeds {
            let done = counts.len() * seeds.len() + count.val_losses.len();
            let total = head_counts.len() * seeds.len();
            let elapsed = started.elapsed().as_secs_f64();
            // Runs with more heads take longer, so this is a lower bound.
            let eta = if done == 0 {
                String::new()
            } else {
                format!(
                    ", at least {:.0} s left",
                    elapsed / done as f64 * (total - done) as f64
                )
            };
            eprintln!(
                "lab heads: run {}/{total}: {h} heads, seed {seed} ({elapsed:.0} s so far{eta})",
                done + 1
            );
            let mut config = base.clone();
            config.model.n_heads = h;
            config.train.seed = seed;
            let run_dir = dir.join(format!("h{h}-s{seed}"));
            count
                .val_losses
                .push(train_run(config, run_dir.clone(), observers)?);
            let (trained, device, data) = open(&run_dir)?;
            let (cfg, model) = (&trained.config, &trained.model);
            count.params = model.num_params();
            let vocab = trained.tokenizer.vocab_size();
            let probe = Probe::new(&data, cfg.model.block_size, vocab, None, seed)?;
            let block = cfg.model.block_size;
            if let Some(measured) = lookup_probe(model, &trained.tokenizer, &data, block, &device) {
                count.lookups.push(measured);
            }
            for p in pattern_scores(model, &probe, &device).0 {
                let block = cfg.model.block_size;
                let l = label(
                    p.induction,
                    p.previous_token,
                    p.first_token,
                    p.mean_distance,
                    block,
                );
                *count.labels.entry(l.to_string()).or_default() += 1;
            }
        }
        counts.push(count);
    }
    Ok(HeadsLab {
        base,
        seeds,
        counts,
    })
}

/// What `lab ambiguity` measured.
#[derive(Debug, Clone)]
pub struct AmbiguityLab {
    /// The run's config.
    pub config: RunConfig,
    /// The sentence whose maps are drawn: the first measured one.
    pub example: GrammarSentence,
    /// Sentences measured.
    pub sentences: usize,
    /// Per `layer * n_heads + head`: mean attention from the last letter of "with" to the
    /// verb's letters.
    pub to_verb: Vec<f64>,
    /// The same, to the letters of the noun before "with".
    pub to_noun: Vec<f64>,
    /// The final head table and the maps of the example.
    pub report: HeadReport,
}

/// Trains the ambiguity run into `dir/run` and measures where "with" looks in attachment
/// sentences.
pub fn ambiguity(
    config: RunConfig,
    dir: &Path,
    observers: Observers<'_>,
) -> Result<AmbiguityLab, LabError> {
    let run_dir = dir.join("run");
    train_run(config, run_dir.clone(), observers)?;
    let (trained, device, data) = open(&run_dir)?;
    let (cfg, tokenizer, model) = (&trained.config, &trained.tokenizer, &trained.model);
    let (layers, heads) = (cfg.model.n_layers, cfg.model.n_heads);
    let mut to_verb = vec![0.0f64; layers * heads];
    let mut to_noun = vec![0.0f64; layers * heads];
    let mut measured: Vec<(GrammarSentence, Vec<u32>)> = Vec::new();
    // The first 50 attachment sentences; those longer than the context are left out.
    let candidates = grammar_sentences(cfg.train.seed.wrapping_add(99), 20_000)
        .into_iter()
        .filter(|s| s.kind == SentenceKind::AttachmentAmbiguity)
        .take(50);
    for sentence in candidates {
        let text = format!(". {}", sentence.text);
        let words: Vec<&str> = sentence.text.split(' ').collect();
        let Some(with) = words.iter().position(|w| *w == "with") else {
            continue;
        };
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
                let row = &maps[l][h][with_end * t..(with_end + 1) * t];
                to_verb[l * heads + h] += verb.clone().map(|j| f64::from(row[j])).sum::<f64>();
                to_noun[l * heads + h] += noun.clone().map(|j| f64::from(row[j])).sum::<f64>();
            }
        }
        measured.push((sentence, ids));
    }
    let Some((example, example_ids)) = measured.first().cloned() else {
        return Err(LabError::Nothing(
            "no attachment sentence fits the model's context".into(),
        ));
    };
    let n = measured.len() as f64;
    to_verb
        .iter_mut()
        .chain(to_noun.iter_mut())
        .for_each(|v| *v /= n);
    let vocab = tokenizer.vocab_size();
    let ids = Some(example_ids.clone());
    let probe = Probe::new(&data, cfg.model.block_size, vocab, ids, cfg.train.seed)?;
    let report = head_report(model, tokenizer, &probe, &example_ids, &device);
    Ok(AmbiguityLab {
        config: trained.config.clone(),
        example,
        sentences: measured.len(),
        to_verb,
        to_noun,
        report,
    })
}
