//! `lab ambiguity`: prepositional-phrase attachment. On the `attach` corpus, what "with"
//! attaches to decides the number of the last verb; the lab measures agreement on forced and
//! ambiguous readings and where each head of "with" and "and" looks.

use headlab_kernels::to_host;
use std::fmt::Write as _;
use std::path::Path;

use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_data::Tokenizer;
use headlab_data::corpus::{
    AttachSentence, Attachment, EITHER, HOLD_VERBS, INSTRUMENTS, POSSESSIONS, attach_sentences,
};
use headlab_heads::{HeadReport, Probe, head_report};
use headlab_model::{ForwardOptions, Gpt};
use headlab_report::REPORT_FILE;
use headlab_train::config::RunConfig;

use crate::{LabError, Runs, lab_config, open, publish_run, train_run, write_summary};

/// The shipped config: 2 layers x 4 heads, byte-level BPE, 1000 steps on the attach corpus.
pub const CONFIG: &str = include_str!("../../../configs/lab-ambiguity.toml");

/// Runs the lab into `out` with `sets` applied to its config: the run in `out/run`, its head
/// table and page beside it, and `summary.md` (returned), which ends with `reproduce`.
pub fn run(
    out: &Path,
    sets: &[String],
    reproduce: &str,
    runs: Runs<'_>,
) -> Result<String, LabError> {
    let config = lab_config(CONFIG, "configs/lab-ambiguity.toml", sets)?;
    let lab = ambiguity(config, out, runs)?;
    publish_run(out, "headlab lab ambiguity", &lab.report, &[REPORT_FILE])?;
    write_summary(out, summary(&lab, reproduce))
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
pub fn ambiguity(config: RunConfig, dir: &Path, runs: Runs<'_>) -> Result<AmbiguityLab, LabError> {
    let run_dir = dir.join("run");
    train_run(config, run_dir.clone(), runs)?;
    let (trained, device, data) = open(&run_dir)?;
    let (cfg, tokenizer, model) = (&trained.config, &trained.tokenizer, &trained.model);
    // First-token ids of each form of the last verb, singular and plural.
    let first = |w: &str| -> Result<u32, LabError> { Ok(tokenizer.encode(&format!(" {w}"))?[0]) };
    let mut forms: Vec<(u32, bool)> = Vec::new();
    for v in HOLD_VERBS {
        forms.push((first(v.singular)?, false));
        forms.push((first(v.plural)?, true));
    }
    let sentences = attach_sentences(cfg.train.seed.wrapping_add(99), 60_000);
    let mut example: Option<(String, Vec<u32>)> = None;
    let mut rows = Vec::new();
    for reading in Reading::ALL {
        let setup = Setup {
            model,
            tokenizer,
            forms: &forms,
            block_size: cfg.model.block_size,
            device: &device,
        };
        rows.push(measure_reading(&setup, reading, &sentences, &mut example)?);
    }
    let Some((example, example_ids)) = example else {
        return Err(LabError::NoAmbiguousSentence);
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

/// What measuring a sentence needs: the model, its tokenizer, the last verb's forms as
/// `(first token id, plural)`, its context length and device.
struct Setup<'a> {
    model: &'a Gpt,
    tokenizer: &'a Tokenizer,
    forms: &'a [(u32, bool)],
    block_size: usize,
    device: &'a Device,
}

/// One row of the summary: the first 100 sentences of `reading` whose subject and object
/// differ in number (and whose "with" and "and" are one token each, within the context),
/// averaged. The first ambiguous one measured becomes `example`.
fn measure_reading(
    setup: &Setup<'_>,
    reading: Reading,
    sentences: &[AttachSentence],
    example: &mut Option<(String, Vec<u32>)>,
) -> Result<ReadingRow, LabError> {
    let n = setup.model.config.n_layers * setup.model.config.n_heads;
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
        let Some(ends) = word_ends(setup.tokenizer, &words, &[s.with, s.and]) else {
            continue;
        };
        let ids = setup.tokenizer.encode(&s.text)?;
        if ids.len() > setup.block_size {
            continue;
        }
        if reading == Reading::Ambiguous && example.is_none() {
            *example = Some((s.text.clone(), ids.clone()));
        }
        let side = if ends[s.with] == ends[s.noun] + 1 {
            &mut adjacent
        } else {
            &mut distant
        };
        measure_sentence(setup, s, &ends, &ids, &mut row, side);
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
    Ok(row)
}

/// Adds one sentence to `row`: each head's attention from "with" and from "and" to the verb
/// and the noun, and whether the model prefers the holder's number after "and"; `side` (the
/// adjacent or the distant tally) gets the heads' mean attention from "with" to the noun.
fn measure_sentence(
    setup: &Setup<'_>,
    s: &AttachSentence,
    ends: &[usize],
    ids: &[u32],
    row: &mut ReadingRow,
    side: &mut (f64, usize),
) {
    let (t, heads) = (ids.len(), setup.model.config.n_heads);
    let n = setup.model.config.n_layers * heads;
    let input = Tensor::<2, Int>::from_data(
        TensorData::new(
            ids.iter().map(|&i| i64::from(i)).collect::<Vec<_>>(),
            [1, t],
        ),
        setup.device,
    );
    let out = setup.model.forward_with(
        input,
        ForwardOptions {
            return_weights: true,
            ..ForwardOptions::default()
        },
    );
    let (verb, noun, with, and) = (ends[s.verb], ends[s.noun], ends[s.with], ends[s.and]);
    for (l, weights) in out.weights.into_iter().enumerate() {
        // [1, h, t, t]
        let a = to_host::<f32, _>(weights);
        for h in 0..heads {
            let at = |q: usize, k: usize| f64::from(a[(h * t + q) * t + k]);
            let k = l * heads + h;
            row.at_with.to_verb[k] += at(with, verb);
            row.at_with.to_noun[k] += at(with, noun);
            row.at_and.to_verb[k] += at(and, verb);
            row.at_and.to_noun[k] += at(and, noun);
            side.0 += at(with, noun) / n as f64;
        }
    }
    side.1 += 1;
    // The holder's number: the subject's for the verb reading, the object's for the noun's.
    let holder = match s.attachment {
        Attachment::Verb => s.subject_plural,
        Attachment::Noun => s.object_plural,
    };
    let logits = to_host::<f32, _>(out.logits);
    let vocab = logits.len() / t;
    let row_logits = &logits[and * vocab..(and + 1) * vocab];
    let mass = |plural: bool| -> f64 {
        setup
            .forms
            .iter()
            .filter(|f| f.1 == plural)
            .map(|f| f64::from(row_logits[f.0 as usize]).exp())
            .sum()
    };
    row.agreement += f64::from(u8::from(mass(holder) > mass(!holder)));
    row.sentences += 1;
}

/// `lab ambiguity`'s summary page: the setup, agreement per reading, where each head looks
/// from "and" and from "with", and what that shows.
pub fn summary(lab: &AmbiguityLab, reproduce: &str) -> String {
    let mut s = intro(lab);
    s += "| reading | sentences | the model prefers the holder's number at \"and\" |\n|---|---|---|\n";
    for r in &lab.rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.3} |",
            r.reading.name(),
            r.sentences,
            r.agreement
        );
    }
    let row = |reading: Reading| lab.rows.iter().find(|r| r.reading == reading);
    let (Some(inst), Some(poss), Some(either)) = (
        row(Reading::Instrument),
        row(Reading::Possession),
        row(Reading::Ambiguous),
    ) else {
        return s;
    };
    let sides = from_and(lab, [inst, poss, either], &mut s);
    from_with(lab, &mut s);
    conclusion([inst, poss, either], &sides, &mut s);
    s += &format!(
        "![attention on an example sentence](attention.png)\n\nThe run's page, with every \
         head's map through training: [report.html](report.html).\n\nReproduce: `{reproduce}`\n"
    );
    s
}

/// The summary's title and the setup it measures.
fn intro(lab: &AmbiguityLab) -> String {
    let (layers, heads) = (lab.config.model.n_layers, lab.config.model.n_heads);
    let mut s = String::from("# lab ambiguity\n\n");
    let _ = writeln!(
        s,
        "In \"{}\", does \"with\" attach to the verb (the subject uses the thing) or to the \
         noun (the object has it)? In the `attach` corpus the sentence ends \"and hide(s) it\", \
         the verb agreeing with whoever has the thing: instruments ({}) attach to the verb, \
         worn things ({}) to the noun, and {} either way at random, so only that last verb \
         shows which. A {layers}-layer, {heads}-head model on {} tokens (\"with\" and \"and\" \
         one token each), {} steps. Measured on sentences whose subject and object differ in \
         number, so the last verb's number tells the reading; \"from the city\" stands between \
         the noun and \"with\" in about half of them.\n",
        lab.example,
        INSTRUMENTS.join(", "),
        POSSESSIONS.join(", "),
        EITHER.join(", "),
        lab.config.data.tokenizer,
        lab.config.train.max_iters
    );
    s
}

/// Heads by where they look from "and" (names `layer.head`).
#[derive(Debug, Default)]
struct Sides {
    /// The verb for instruments, the noun for possessions.
    switching: Vec<String>,
    /// At least 0.1 on both the verb and the noun under the ambiguous reading.
    both: Vec<String>,
    /// The verb under every reading.
    verb_side: Vec<String>,
    /// The noun under every reading.
    noun_side: Vec<String>,
}

/// The table of attention from "and" to the verb and the noun, per reading, appended to `s`.
fn from_and(lab: &AmbiguityLab, [inst, poss, either]: [&ReadingRow; 3], s: &mut String) -> Sides {
    let heads = lab.config.model.n_heads;
    let n = lab.config.model.n_layers * heads;
    *s += "\nAttention from \"and\", the position that predicts the agreeing verb, to the main \
          verb and to the object noun:\n\n";
    *s += "| layer.head | instrument: verb | noun | possession: verb | noun | either: verb | noun | reads |\n|---|---|---|---|---|---|---|---|\n";
    let margin = 0.05;
    let mut sides = Sides::default();
    for k in 0..n {
        let (iv, inn) = (inst.at_and.to_verb[k], inst.at_and.to_noun[k]);
        let (pv, pn) = (poss.at_and.to_verb[k], poss.at_and.to_noun[k]);
        let (ev, en) = (either.at_and.to_verb[k], either.at_and.to_noun[k]);
        let name = format!("{}.{}", k / heads, k % heads);
        let reads = if iv > inn + margin && pn > pv + margin {
            sides.switching.push(name.clone());
            "switches: verb for instruments, noun for possessions"
        } else if iv > inn + margin && pv > pn + margin {
            sides.verb_side.push(name.clone());
            "the verb either way"
        } else if inn > iv + margin && pn > pv + margin {
            sides.noun_side.push(name.clone());
            "the noun either way"
        } else {
            "no side by more than 0.05"
        };
        if ev >= 0.1 && en >= 0.1 {
            sides
                .both
                .push(format!("{name} ({ev:.2} verb, {en:.2} noun)"));
        }
        let _ = writeln!(
            *s,
            "| {name} | {iv:.3} | {inn:.3} | {pv:.3} | {pn:.3} | {ev:.3} | {en:.3} | {reads} |"
        );
    }
    sides
}

/// The table of attention from "with" over all sentences, and the distance effect, appended
/// to `s`.
fn from_with(lab: &AmbiguityLab, s: &mut String) {
    let heads = lab.config.model.n_heads;
    let n = lab.config.model.n_layers * heads;
    *s += "\nFrom \"with\" (which comes before the thing, so it cannot know the reading yet), all \
          sentences:\n\n| layer.head | to verb | to noun |\n|---|---|---|\n";
    let total: usize = lab.rows.iter().map(|r| r.sentences).sum::<usize>().max(1);
    for k in 0..n {
        let mean = |f: &dyn Fn(&ReadingRow) -> f64| {
            lab.rows
                .iter()
                .map(|r| f(r) * r.sentences as f64)
                .sum::<f64>()
                / total as f64
        };
        let _ = writeln!(
            *s,
            "| {}.{} | {:.3} | {:.3} |",
            k / heads,
            k % heads,
            mean(&|r| r.at_with.to_verb[k]),
            mean(&|r| r.at_with.to_noun[k])
        );
    }
    let adjacent = lab.rows.iter().map(|r| r.noun_adjacent).sum::<f64>() / 3.0;
    let distant = lab.rows.iter().map(|r| r.noun_distant).sum::<f64>() / 3.0;
    let _ = writeln!(
        *s,
        "\nDistance: from \"with\", a head gives the noun {adjacent:.3} of its attention on \
         average when the noun is next to \"with\", and {distant:.3} when \"from the city\" \
         stands between them.\n"
    );
}

/// What the tables show and what they do not, appended to `s`.
fn conclusion([inst, poss, either]: [&ReadingRow; 3], sides: &Sides, s: &mut String) {
    *s += "## What this shows, and what it does not\n\n";
    let _ = write!(
        *s,
        "With an instrument the model prefers the subject's number at \"and\" in {:.0}% of \
         sentences, with a possession the object's in {:.0}%: ",
        100.0 * inst.agreement,
        100.0 * poss.agreement
    );
    *s += if inst.agreement > 0.9 && poss.agreement > 0.9 {
        "it has learned what the attachment decides. "
    } else {
        "it has not fully learned what the attachment decides. "
    };
    let _ = write!(
        *s,
        "With a thing that fits both, the reading is a coin toss the model cannot see, and it \
         matches it in {:.0}% of sentences. ",
        100.0 * either.agreement
    );
    if sides.switching.is_empty() {
        *s += "No head switches from the verb to the noun with the reading by more than 0.05. ";
    } else {
        let _ = write!(
            *s,
            "Heads that look at the verb under the instrument reading and at the noun under the \
             possession reading: {}. ",
            sides.switching.join(", ")
        );
    }
    if !sides.verb_side.is_empty() && !sides.noun_side.is_empty() {
        let _ = write!(
            *s,
            "Different heads fetch the two candidates under every reading: {} the verb, {} the \
             noun; since where they look does not change with the reading, the choice between \
             the two numbers is not made by where these heads look. ",
            sides.verb_side.join(", "),
            sides.noun_side.join(", ")
        );
    }
    if sides.both.is_empty() {
        *s += "Under the ambiguous sentences no head gives both the verb and the noun 0.1 of \
              its attention or more: no head keeps both readings in view.";
    } else {
        let _ = write!(
            *s,
            "Under the ambiguous sentences these heads give both the verb and the noun at \
             least 0.1 of their attention, keeping both in view: {}.",
            sides.both.join(", ")
        );
    }
    *s += "\n\nAttention is where a head reads from, not proof of what the model uses: the \
          number could also reach \"and\" through the residual stream of other positions (the \
          verb's own form carries the subject's number). One model, one seed, one size.\n\n";
}
