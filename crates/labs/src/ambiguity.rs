//! `lab ambiguity`: prepositional-phrase attachment. On the `attach` corpus, what "with"
//! attaches to decides the number of the last verb; the lab measures agreement on forced and
//! ambiguous readings and where each head of "with" and "and" looks; then what the model needs
//! those heads for: each head zeroed alone (and the verb-side and noun-side heads together),
//! agreement per reading again; and each head's output patched from a sentence's twin (the
//! same sentence with an instrument for a possession, or the other way), whether the choice
//! at "and" follows the twin's reading.

use headlab_kernels::to_host;
use std::fmt::Write as _;
use std::path::Path;

use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_data::Tokenizer;
use headlab_data::corpus::{
    AttachSentence, Attachment, EITHER, HOLD_VERBS, INSTRUMENTS, POSSESSIONS, attach_sentences,
};
use headlab_heads::{HeadReport, Probe, head_report};
use headlab_model::{ForwardOptions, Gpt, PatchSite};
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
    /// Heads by where they look from "and".
    pub sides: Sides,
    /// Each head zeroed alone, then the verb-side and the noun-side heads together (where a
    /// side has more than one).
    pub zeroing: Vec<Zeroed>,
    /// Each head patched from the twins.
    pub twins: Vec<TwinPatch>,
    /// Per direction (as [`TwinPatch::follows`]): the share following the twin's holder
    /// with nothing patched, and the twin's own share.
    pub twin_base: TwinBase,
}

/// Some heads zeroed: agreement at "and" per reading.
#[derive(Debug, Clone, PartialEq)]
pub struct Zeroed {
    /// The heads, "layer.head" or a side's name and heads.
    pub what: String,
    /// Per reading of [`Reading::ALL`]: the share preferring the holder's number.
    pub agreement: [f64; 3],
}

/// One head's output at every position taken from a sentence's twin, whose other thing
/// gives the other reading (so the other holder).
#[derive(Debug, Clone, PartialEq)]
pub struct TwinPatch {
    /// `layer * n_heads + head`.
    pub head: usize,
    /// Per direction, instrument sentences patched from their possession twins, then the other
    /// way: the twins measured, and the share whose choice at "and" follows the twin's holder.
    pub follows: [(usize, f64); 2],
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
    let setup = |mask: Option<Tensor<2>>| Setup {
        model,
        tokenizer,
        forms: &forms,
        block_size: cfg.model.block_size,
        device: &device,
        mask,
    };
    for reading in Reading::ALL {
        rows.push(measure_reading(
            &setup(None),
            reading,
            &sentences,
            &mut example,
        )?);
    }
    let Some((example, example_ids)) = example else {
        return Err(LabError::NoAmbiguousSentence);
    };
    let (n_layers, n_heads) = (cfg.model.n_layers, cfg.model.n_heads);
    let sides = sides(&rows);
    let mut sets: Vec<(String, Vec<usize>)> = (0..n_layers * n_heads)
        .map(|k| (format!("{}.{}", k / n_heads, k % n_heads), vec![k]))
        .collect();
    for (what, heads) in [
        ("verb side", &sides.verb_side),
        ("noun side", &sides.noun_side),
    ] {
        if heads.len() > 1 {
            let names: Vec<String> = heads
                .iter()
                .map(|&k| format!("{}.{}", k / n_heads, k % n_heads))
                .collect();
            sets.push((format!("{what}: {}", names.join(" + ")), heads.clone()));
        }
    }
    let mut zeroing = Vec::new();
    for (what, heads) in sets {
        let mut m = vec![1.0f32; n_layers * n_heads];
        heads.iter().for_each(|&k| m[k] = 0.0);
        let mask = Tensor::from_data(TensorData::new(m, [n_layers, n_heads]), &device);
        let mut agreement = [0.0; 3];
        for (i, reading) in Reading::ALL.into_iter().enumerate() {
            let row = measure_reading(&setup(Some(mask.clone())), reading, &sentences, &mut None)?;
            agreement[i] = row.agreement;
        }
        zeroing.push(Zeroed { what, agreement });
    }
    let (twins, twin_base) = twin_patches(&setup(None), &sentences)?;
    let vocab = tokenizer.vocab_size();
    let ids = Some(example_ids.clone());
    let probe = Probe::new(&data, cfg.model.block_size, vocab, ids, cfg.train.seed)?;
    let report = head_report(model, tokenizer, &probe, &example_ids, &device);
    Ok(AmbiguityLab {
        config: trained.config.clone(),
        example,
        rows,
        report,
        sides,
        zeroing,
        twins,
        twin_base,
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
    /// `[n_layers, n_heads]`: 0 zeroes a head's output.
    mask: Option<Tensor<2>>,
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
            head_mask: setup.mask.clone(),
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
    let odds = plural_odds(setup.forms, &to_host::<f32, _>(out.logits), t, and);
    row.agreement += f64::from(u8::from((odds > 0.0) == holder));
    row.sentences += 1;
}

/// The log odds of the plural forms of the last verb against the singular ones at position
/// `at` of logits `[1, t, vocab]`: above 0, the model prefers a plural holder.
fn plural_odds(forms: &[(u32, bool)], logits: &[f32], t: usize, at: usize) -> f64 {
    let vocab = logits.len() / t;
    let row = &logits[at * vocab..(at + 1) * vocab];
    let mass = |plural: bool| -> f64 {
        forms
            .iter()
            .filter(|f| f.1 == plural)
            .map(|f| f64::from(row[f.0 as usize]).exp())
            .sum()
    };
    mass(true).ln() - mass(false).ln()
}

/// Twins per direction: enough for shares to two decimals' worth.
const TWINS: usize = 60;

/// Per direction: the share following the twin's holder with nothing patched, and the twin's.
type TwinBase = [(f64, f64); 2];

/// One sentence and its twin, tokenized alike up to the thing.
struct Twin {
    ids: Vec<u32>,
    twin: Vec<u32>,
    /// The "and" token.
    and: usize,
    /// The twin's holder's number.
    twin_plural: bool,
}

/// Each head's output patched from the twin (its other thing gives the other reading), in
/// both directions; and the shares with nothing patched and of the twin itself.
fn twin_patches(
    setup: &Setup<'_>,
    sentences: &[AttachSentence],
) -> Result<(Vec<TwinPatch>, TwinBase), LabError> {
    let (n_layers, n_heads) = (setup.model.config.n_layers, setup.model.config.n_heads);
    let mut pairs: [Vec<Twin>; 2] = [Vec::new(), Vec::new()];
    for s in sentences
        .iter()
        .filter(|s| !s.ambiguous && s.subject_plural != s.object_plural)
    {
        let (dir, from, to, twin_plural) = match s.attachment {
            Attachment::Verb => (0, &INSTRUMENTS, &POSSESSIONS, s.object_plural),
            Attachment::Noun => (1, &POSSESSIONS, &INSTRUMENTS, s.subject_plural),
        };
        if pairs[dir].len() >= TWINS {
            continue;
        }
        let words: Vec<&str> = s.text.split(' ').collect();
        let thing = s.and - 1;
        let Some(i) = from.iter().position(|t| *t == words[thing]) else {
            continue;
        };
        let mut other = words.clone();
        other[thing] = to[i];
        let single = [s.with, s.and];
        let (Some(ends), Some(twin_ends)) = (
            word_ends(setup.tokenizer, &words, &single),
            word_ends(setup.tokenizer, &other, &single),
        ) else {
            continue;
        };
        let (ids, twin) = (
            setup.tokenizer.encode(&s.text)?,
            setup.tokenizer.encode(&other.join(" "))?,
        );
        if ends != twin_ends || ids.len() != twin.len() || ids.len() > setup.block_size {
            continue;
        }
        pairs[dir].push(Twin {
            ids,
            twin,
            and: ends[s.and],
            twin_plural,
        });
    }
    let run = |ids: &[u32], patch: Option<(usize, PatchSite)>, outputs: bool| {
        let t = ids.len();
        let input = Tensor::<2, Int>::from_data(
            TensorData::new(
                ids.iter().map(|&i| i64::from(i)).collect::<Vec<_>>(),
                [1, t],
            ),
            setup.device,
        );
        setup.model.forward_with(
            input,
            ForwardOptions {
                patch,
                return_head_outputs: outputs,
                ..ForwardOptions::default()
            },
        )
    };
    let follows = |twin: &Twin, logits: Tensor<3>| -> bool {
        let odds = plural_odds(
            setup.forms,
            &to_host::<f32, _>(logits),
            twin.ids.len(),
            twin.and,
        );
        (odds > 0.0) == twin.twin_plural
    };
    let share = |hits: usize, n: usize| {
        if n == 0 {
            f64::NAN
        } else {
            hits as f64 / n as f64
        }
    };
    let mut base = [(0.0, 0.0); 2];
    let mut outputs: [Vec<Vec<Tensor<4>>>; 2] = [Vec::new(), Vec::new()];
    for dir in 0..2 {
        let (mut plain, mut own) = (0, 0);
        for twin in &pairs[dir] {
            plain += usize::from(follows(twin, run(&twin.ids, None, false).logits));
            let out = run(&twin.twin, None, true);
            own += usize::from(follows(twin, out.logits));
            outputs[dir].push(out.head_outputs);
        }
        let n = pairs[dir].len();
        base[dir] = (share(plain, n), share(own, n));
    }
    let mut patches = Vec::new();
    for k in 0..n_layers * n_heads {
        let (layer, head) = (k / n_heads, k % n_heads);
        let mut out = [(0, 0.0); 2];
        for dir in 0..2 {
            let mut hits = 0;
            for (twin, heads) in pairs[dir].iter().zip(&outputs[dir]) {
                let site = PatchSite::Head {
                    head,
                    value: heads[layer].clone(),
                };
                hits += usize::from(follows(
                    twin,
                    run(&twin.ids, Some((layer, site)), false).logits,
                ));
            }
            out[dir] = (pairs[dir].len(), share(hits, pairs[dir].len()));
        }
        patches.push(TwinPatch {
            head: k,
            follows: out,
        });
    }
    Ok((patches, base))
}

/// The zeroing and patching tables, and which heads the model needs for which reading,
/// appended to `s`.
fn causes(lab: &AmbiguityLab, s: &mut String) {
    let heads = lab.config.model.n_heads;
    let intact: Vec<f64> = Reading::ALL
        .iter()
        .map(|r| {
            lab.rows
                .iter()
                .find(|x| x.reading == *r)
                .map_or(f64::NAN, |x| x.agreement)
        })
        .collect();
    *s += "\n## What the model needs each head for\n\nZeroing: each head's output set to 0 \
          alone (and each side's heads together), the share of sentences on which the model \
          still prefers the holder's number at \"and\":\n\n| zeroed | instrument (verb) | \
          possession (noun) | either |\n|---|---|---|---|\n";
    let _ = writeln!(
        *s,
        "| nothing | {:.3} | {:.3} | {:.3} |",
        intact[0], intact[1], intact[2]
    );
    for z in &lab.zeroing {
        let _ = writeln!(
            *s,
            "| {} | {:.3} | {:.3} | {:.3} |",
            z.what, z.agreement[0], z.agreement[1], z.agreement[2]
        );
    }
    let singles: Vec<&Zeroed> = lab
        .zeroing
        .iter()
        .filter(|z| !z.what.contains(':'))
        .collect();
    let needed = |i: usize| -> Vec<String> {
        singles
            .iter()
            .filter(|z| intact[i] - z.agreement[i] >= 0.10)
            .map(|z| format!("{} ({:.2} -> {:.2})", z.what, intact[i], z.agreement[i]))
            .collect()
    };
    let say = |v: Vec<String>| {
        if v.is_empty() {
            "no single head (none lowers it by 0.10 or more)".to_string()
        } else {
            v.join(", ")
        }
    };
    let _ = writeln!(
        *s,
        "\nThe instrument reading needs {}; the possession reading needs {}.\n",
        say(needed(0)),
        say(needed(1))
    );
    let [(n0, _), (n1, _)] = lab.twins.first().map_or([(0, 0.0); 2], |t| t.follows);
    let _ = writeln!(
        *s,
        "Patching: a sentence's twin is the same sentence with the thing swapped for the one \
         in the same place of the other list (\"{}\" for \"{}\"), which moves the holder to \
         the other noun. One head's output, at every position, is taken from the twin; the \
         share of sentences whose choice at \"and\" then follows the twin's holder \
         ({n0} instrument sentences, {n1} possession sentences):\n\n| patched from the twin | \
         instrument sentence, possession twin | possession sentence, instrument twin |\n\
         |---|---|---|",
        POSSESSIONS[0], INSTRUMENTS[0]
    );
    let _ = writeln!(
        *s,
        "| nothing | {:.3} | {:.3} |",
        lab.twin_base[0].0, lab.twin_base[1].0
    );
    for t in &lab.twins {
        let _ = writeln!(
            *s,
            "| {} | {:.3} | {:.3} |",
            head_name(heads, t.head),
            t.follows[0].1,
            t.follows[1].1
        );
    }
    let _ = writeln!(
        *s,
        "| the twin itself | {:.3} | {:.3} |\n",
        lab.twin_base[0].1, lab.twin_base[1].1
    );
    let carriers: Vec<String> = lab
        .twins
        .iter()
        .filter(|t| {
            t.follows
                .iter()
                .zip(&lab.twin_base)
                .all(|((_, f), (plain, _))| f - plain >= 0.25)
        })
        .map(|t| head_name(heads, t.head))
        .collect();
    let _ = writeln!(
        *s,
        "{}\n",
        if carriers.is_empty() {
            "No single head's output carries the reading: patching any one of them from the twin \
             moves fewer than a quarter more of the choices in one direction or the other."
                .to_string()
        } else {
            format!(
                "The reading travels through {}: patching its output alone from the twin moves \
                 the choice to the twin's holder in at least a quarter more of the sentences, \
                 in both directions.",
                carriers.join(", ")
            )
        }
    );
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
    from_and(lab, [inst, poss, either], &mut s);
    from_with(lab, &mut s);
    causes(lab, &mut s);
    conclusion(lab, [inst, poss, either], &mut s);
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

/// Heads by where they look from "and", as `layer * n_heads + head`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sides {
    /// The verb for instruments, the noun for possessions.
    pub switching: Vec<usize>,
    /// At least 0.1 on both the verb and the noun under the ambiguous reading.
    pub both: Vec<usize>,
    /// The verb under every reading.
    pub verb_side: Vec<usize>,
    /// The noun under every reading.
    pub noun_side: Vec<usize>,
}

/// A head's side: it looks at one candidate more than the other by this much.
const SIDE_MARGIN: f64 = 0.05;

/// Sorts the heads by where they look from "and" under the three readings of `rows`.
fn sides(rows: &[ReadingRow]) -> Sides {
    let mut sides = Sides::default();
    let row = |reading: Reading| rows.iter().find(|r| r.reading == reading);
    let (Some(inst), Some(poss), Some(either)) = (
        row(Reading::Instrument),
        row(Reading::Possession),
        row(Reading::Ambiguous),
    ) else {
        return sides;
    };
    for k in 0..inst.at_and.to_verb.len() {
        let (iv, inn) = (inst.at_and.to_verb[k], inst.at_and.to_noun[k]);
        let (pv, pn) = (poss.at_and.to_verb[k], poss.at_and.to_noun[k]);
        let margin = SIDE_MARGIN;
        if iv > inn + margin && pn > pv + margin {
            sides.switching.push(k);
        } else if iv > inn + margin && pv > pn + margin {
            sides.verb_side.push(k);
        } else if inn > iv + margin && pn > pv + margin {
            sides.noun_side.push(k);
        }
        if either.at_and.to_verb[k] >= 0.1 && either.at_and.to_noun[k] >= 0.1 {
            sides.both.push(k);
        }
    }
    sides
}

/// The table of attention from "and" to the verb and the noun, per reading, appended to `s`.
fn from_and(lab: &AmbiguityLab, [inst, poss, either]: [&ReadingRow; 3], s: &mut String) {
    let heads = lab.config.model.n_heads;
    let n = lab.config.model.n_layers * heads;
    *s += "\nAttention from \"and\", the position that predicts the agreeing verb, to the main \
          verb and to the object noun:\n\n";
    *s += "| layer.head | instrument: verb | noun | possession: verb | noun | either: verb | noun | reads |\n|---|---|---|---|---|---|---|---|\n";
    let sides = &lab.sides;
    for k in 0..n {
        let (iv, inn) = (inst.at_and.to_verb[k], inst.at_and.to_noun[k]);
        let (pv, pn) = (poss.at_and.to_verb[k], poss.at_and.to_noun[k]);
        let (ev, en) = (either.at_and.to_verb[k], either.at_and.to_noun[k]);
        let reads = if sides.switching.contains(&k) {
            "switches: verb for instruments, noun for possessions"
        } else if sides.verb_side.contains(&k) {
            "the verb either way"
        } else if sides.noun_side.contains(&k) {
            "the noun either way"
        } else {
            "no side by more than 0.05"
        };
        let _ = writeln!(
            *s,
            "| {} | {iv:.3} | {inn:.3} | {pv:.3} | {pn:.3} | {ev:.3} | {en:.3} | {reads} |",
            head_name(heads, k)
        );
    }
}

/// `layer.head` of head `k` (layer-major).
fn head_name(n_heads: usize, k: usize) -> String {
    format!("{}.{}", k / n_heads, k % n_heads)
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
fn conclusion(lab: &AmbiguityLab, [inst, poss, either]: [&ReadingRow; 3], s: &mut String) {
    let heads = lab.config.model.n_heads;
    let names = |ks: &[usize]| -> Vec<String> { ks.iter().map(|&k| head_name(heads, k)).collect() };
    let sides = &lab.sides;
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
            names(&sides.switching).join(", ")
        );
    }
    if !sides.verb_side.is_empty() && !sides.noun_side.is_empty() {
        let _ = write!(
            *s,
            "Different heads fetch the two candidates under every reading: {} the verb, {} the \
             noun; since where they look does not change with the reading, the choice between \
             the two numbers is not made by where these heads look. ",
            names(&sides.verb_side).join(", "),
            names(&sides.noun_side).join(", ")
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
            sides
                .both
                .iter()
                .map(|&k| format!(
                    "{} ({:.2} verb, {:.2} noun)",
                    head_name(heads, k),
                    either.at_and.to_verb[k],
                    either.at_and.to_noun[k]
                ))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    *s += "\n\nAttention is where a head reads from; the zeroing and patching tables above are \
          what the model uses it for. One model, one seed, one size.\n\n";
}
