//! The labs' experiments, as data: each trains its runs and measures them; `headlab-report`
//! writes the summaries and the CLI the files.
//!
//! - [`induction`]: a 2-layer attention-only model on the induction corpus forms the
//!   previous-token -> induction circuit of Olsson et al. 2022, with a visible phase change.
//! - [`heads`]: equal d_model and parameter count with 1..64 heads, several seeds, on the
//!   two-lookup `lookup` corpus, with which head fetches which source ([`lookup_probe`]).
//! - [`ambiguity`]: on the `attach` corpus, where "with" and "and" look when what "with"
//!   attaches to decides the last verb's number.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_data::corpus::{
    Attachment, HOLD_VERBS, LOOKUP_ALPHABET, LOOKUP_FAR, LOOKUP_NEAR, attach_sentences, lookup_rule,
};
use headlab_data::{DataError, Dataset, Split, Tokenizer, TokenizerError};
use headlab_model::{ForwardOptions, Gpt};
use headlab_train::config::RunConfig;
use headlab_train::run::{OpenError, Trained, open_trained};
use headlab_train::trainer::{Observer, TrainError, TrainOptions, load_dataset, train};
use thiserror::Error;

use crate::analysis::{HeadReport, Probe, head_report, pattern_scores};
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
    /// The same per seed, in seed order.
    pub run_labels: Vec<BTreeMap<String, usize>>,
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
    /// Per head, with it zeroed: the share of predictions that still fit the near source
    /// (the most likely letter is one the near letter allows, whatever the far one), which
    /// is 1 while the near lookup survives and about 1/4 once it is lost.
    pub ablated_fits_near: Vec<f64>,
    /// The same for the far source.
    pub ablated_fits_far: Vec<f64>,
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
    let m = LOOKUP_ALPHABET.len() as u8;
    let source = |w: usize, p: usize, back: usize| letter[ids[w * block + p + 1 - back] as usize];
    // Shares of predictions whose most likely letter is the rule's, fits the near source
    // (some far letter would give it), and fits the far source.
    let measure = |logits: Tensor<3>| {
        let logits = logits
            .into_data()
            .try_into_vec_as::<f32>()
            .expect("f32 logits");
        let (mut hits, mut near, mut far) = (0usize, 0usize, 0usize);
        for (w, p) in queries() {
            let row = &logits[(w * block + p) * vocab..(w * block + p + 1) * vocab];
            let best = (0..vocab).fold(0, |b, v| if row[v] > row[b] { v } else { b });
            let guess = letter[best];
            hits += usize::from(guess == rule(w, p));
            let (a, b) = (source(w, p, LOOKUP_NEAR), source(w, p, LOOKUP_FAR));
            near += usize::from((0..m).any(|x| lookup_rule(a, x) == guess));
            far += usize::from((0..m).any(|x| lookup_rule(x, b) == guess));
        }
        let n = queries().count() as f64;
        (hits as f64 / n, near as f64 / n, far as f64 / n)
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
    let accuracy_all = measure(out.logits).0;
    let ablations: Vec<(f64, f64, f64)> = (0..layers * heads)
        .map(|k| {
            let mut mask = vec![1.0f32; layers * heads];
            mask[k] = 0.0;
            let mask = Tensor::<2>::from_data(TensorData::new(mask, [layers, heads]), device);
            let options = ForwardOptions {
                head_mask: Some(mask),
                ..ForwardOptions::default()
            };
            measure(model.forward_with(input.clone(), options).logits)
        })
        .collect();
    Some(LookupProbe {
        predictions: queries().count(),
        accuracy: accuracy_all,
        to_near,
        to_far,
        ablated: ablations.iter().map(|a| a.0).collect(),
        ablated_fits_near: ablations.iter().map(|a| a.1).collect(),
        ablated_fits_far: ablations.iter().map(|a| a.2).collect(),
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
            run_labels: Vec::new(),
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
            let mut run_labels = BTreeMap::new();
            for p in pattern_scores(model, &probe, &device).0 {
                let l = label(
                    p.induction,
                    p.previous_token,
                    p.first_token,
                    p.mean_distance,
                    block,
                );
                *count.labels.entry(l.to_string()).or_default() += 1;
                *run_labels.entry(l.to_string()).or_default() += 1;
            }
            count.run_labels.push(run_labels);
        }
        counts.push(count);
    }
    Ok(HeadsLab {
        base,
        seeds,
        counts,
    })
}

/// The sentences `lab ambiguity` measures, by what decides the attachment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reading {
    /// An instrument: "with" attaches to the verb, the last verb agrees with the subject.
    Instrument,
    /// A possession: "with" attaches to the noun, the last verb agrees with the object.
    Possession,
    /// A thing that fits both: read either way, which only the last verb shows.
    Ambiguous,
}

impl Reading {
    /// The three, in table order.
    pub const ALL: [Reading; 3] = [Reading::Instrument, Reading::Possession, Reading::Ambiguous];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Reading::Instrument => "instrument (verb)",
            Reading::Possession => "possession (noun)",
            Reading::Ambiguous => "either",
        }
    }
}

/// Attention of every head (`layer * n_heads + head`) from one position to the verb and to
/// the object noun, averaged over a set of sentences.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Looks {
    /// To the main verb's (last) token.
    pub to_verb: Vec<f64>,
    /// To the object noun's (last) token.
    pub to_noun: Vec<f64>,
}

/// One kind of sentence in `lab ambiguity`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReadingRow {
    /// Which sentences.
    pub reading: Reading,
    /// How many were measured (subject and object differ in number, so the last verb tells
    /// the attachment).
    pub sentences: usize,
    /// From the "with" token.
    pub at_with: Looks,
    /// From the "and" token, where the model predicts the verb that agrees with the holder.
    pub at_and: Looks,
    /// Share of sentences where the model puts more probability on the holder's number of
    /// the last verb than on the other number.
    pub agreement: f64,
    /// The same for "with" next to the noun, and for "from the city" between them: attention
    /// to the noun from "with", mean over heads.
    pub noun_adjacent: f64,
    /// See `noun_adjacent`.
    pub noun_distant: f64,
}

/// What `lab ambiguity` measured.
#[derive(Debug, Clone)]
pub struct AmbiguityLab {
    /// The run's config.
    pub config: RunConfig,
    /// The sentence whose maps are drawn: the first measured ambiguous one.
    pub example: String,
    /// One row per reading.
    pub rows: Vec<ReadingRow>,
    /// The final head table and the maps of the example.
    pub report: HeadReport,
}

/// Index of the last token of each word of `words` once `tokenizer` encodes them joined by
/// spaces, or `None` when the words do not split that way (or a word is not one token where
/// `single` asks it to be).
fn word_ends(tokenizer: &Tokenizer, words: &[&str], single: &[usize]) -> Option<Vec<usize>> {
    let mut ends = Vec::with_capacity(words.len());
    let mut before = 0;
    for i in 0..words.len() {
        let n = tokenizer.encode(&words[..=i].join(" ")).ok()?.len();
        if n <= before || (single.contains(&i) && n != before + 1) {
            return None;
        }
        ends.push(n - 1);
        before = n;
    }
    Some(ends)
}

/// Trains the ambiguity run into `dir/run` on the `attach` corpus and measures, for every
/// head, where "with" and "and" look under each reading.
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
    let n = layers * heads;
    // First-token ids of each form of the last verb, singular and plural.
    let first = |w: &str| -> Result<u32, LabError> { Ok(tokenizer.encode(&format!(" {w}"))?[0]) };
    let mut forms: Vec<(u32, bool)> = Vec::new();
    for v in HOLD_VERBS {
        forms.push((first(v.singular)?, false));
        forms.push((first(v.plural)?, true));
    }
    let mut rows = Vec::new();
    let mut example: Option<(String, Vec<u32>)> = None;
    let sentences = attach_sentences(cfg.train.seed.wrapping_add(99), 60_000);
    for reading in Reading::ALL {
        let mut row = ReadingRow {
            reading,
            sentences: 0,
            at_with: Looks {
                to_verb: vec![0.0; n],
                to_noun: vec![0.0; n],
            },
            at_and: Looks {
                to_verb: vec![0.0; n],
                to_noun: vec![0.0; n],
            },
            agreement: 0.0,
            noun_adjacent: 0.0,
            noun_distant: 0.0,
        };
        let (mut adjacent, mut distant) = ((0.0, 0usize), (0.0, 0usize));
        let picked = sentences.iter().filter(|s| {
            s.subject_plural != s.object_plural
                && match reading {
                    Reading::Ambiguous => s.ambiguous,
                    Reading::Instrument => !s.ambiguous && s.attachment == Attachment::Verb,
                    Reading::Possession => !s.ambiguous && s.attachment == Attachment::Noun,
                }
        });
        for s in picked.take(100) {
            let words: Vec<&str> = s.text.split(' ').collect();
            let Some(ends) = word_ends(tokenizer, &words, &[s.with, s.and]) else {
                continue;
            };
            let ids = tokenizer.encode(&s.text)?;
            let t = ids.len();
            if t > cfg.model.block_size {
                continue;
            }
            if reading == Reading::Ambiguous && example.is_none() {
                example = Some((s.text.clone(), ids.clone()));
            }
            let input = Tensor::<2, Int>::from_data(
                TensorData::new(
                    ids.iter().map(|&i| i64::from(i)).collect::<Vec<_>>(),
                    [1, t],
                ),
                &device,
            );
            let out = model.forward_with(
                input,
                ForwardOptions {
                    return_weights: true,
                    ..ForwardOptions::default()
                },
            );
            let (verb, noun, with, and) = (ends[s.verb], ends[s.noun], ends[s.with], ends[s.and]);
            for (l, weights) in out.weights.into_iter().enumerate() {
                // [1, h, t, t]
                let a = weights
                    .into_data()
                    .try_into_vec_as::<f32>()
                    .expect("f32 weights");
                for h in 0..heads {
                    let at = |q: usize, k: usize| f64::from(a[(h * t + q) * t + k]);
                    let k = l * heads + h;
                    row.at_with.to_verb[k] += at(with, verb);
                    row.at_with.to_noun[k] += at(with, noun);
                    row.at_and.to_verb[k] += at(and, verb);
                    row.at_and.to_noun[k] += at(and, noun);
                    let side = if with == noun + 1 {
                        &mut adjacent
                    } else {
                        &mut distant
                    };
                    side.0 += at(with, noun) / n as f64;
                }
            }
            if with == noun + 1 {
                adjacent.1 += 1;
            } else {
                distant.1 += 1;
            }
            // The holder's number: the subject's for the verb reading, the object's for the noun's.
            let holder = match s.attachment {
                Attachment::Verb => s.subject_plural,
                Attachment::Noun => s.object_plural,
            };
            let logits = out
                .logits
                .into_data()
                .try_into_vec_as::<f32>()
                .expect("f32 logits");
            let vocab = logits.len() / t;
            let row_logits = &logits[and * vocab..(and + 1) * vocab];
            let mass = |plural: bool| -> f64 {
                forms
                    .iter()
                    .filter(|f| f.1 == plural)
                    .map(|f| f64::from(row_logits[f.0 as usize]).exp())
                    .sum()
            };
            row.agreement += f64::from(u8::from(mass(holder) > mass(!holder)));
            row.sentences += 1;
        }
        let count = row.sentences.max(1) as f64;
        for v in [
            &mut row.at_with.to_verb,
            &mut row.at_with.to_noun,
            &mut row.at_and.to_verb,
            &mut row.at_and.to_noun,
        ] {
            v.iter_mut().for_each(|x| *x /= count);
        }
        row.agreement /= count;
        row.noun_adjacent = adjacent.0 / adjacent.1.max(1) as f64;
        row.noun_distant = distant.0 / distant.1.max(1) as f64;
        rows.push(row);
    }
    let Some((example, example_ids)) = example else {
        return Err(LabError::Nothing(
            "no ambiguous sentence fits the model's context with \"with\" and \"and\" as one \
             token each (lab ambiguity needs data.builtin = \"attach\" and data.tokenizer = \
             \"bpe\")"
                .into(),
        ));
    };
    let vocab = tokenizer.vocab_size();
    let ids = Some(example_ids.clone());
    let probe = Probe::new(&data, cfg.model.block_size, vocab, ids, cfg.train.seed)?;
    let report = head_report(model, tokenizer, &probe, &example_ids, &device);
    Ok(AmbiguityLab {
        config: trained.config.clone(),
        example,
        rows,
        report,
    })
}
