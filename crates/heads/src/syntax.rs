//! Syntactic heads on grammar text: for every head and dependency, how often the word it
//! attends to most is the related word (Clark et al. 2019, "What does BERT look at?"),
//! against the best fixed-offset rule; where the verb looks when it writes its number; and
//! whether zeroing heads breaks agreement (a forced choice between the verb's two forms).
//!
//! The dependencies come from the corpus's own parser ([`headlab_data::syntax`]).
//!
//! Words, not tokens. A word's *unit* is its tokens plus its boundary (the space or "." after
//! it): a char-level model keeps what it read of a word at its end, and on the default run
//! the head that carries the subject's number to the verb puts 0.53 of its attention on the
//! space after the subject noun and almost none on the noun's letters, so scoring letters
//! alone would miss it. With a BPE, whose tokens carry the space before a word (" dog"), the
//! boundary is dropped when its token starts the next word; a unit is then the word's tokens.
//! Attention *to* a word is summed over its unit (Clark et al. sum over a word's pieces).
//! Attention *from* a word is read at its unit's last token, the first position that has
//! seen the whole word.
//!
//! Each sentence is read in a window of the text that ends at its "." and holds up to
//! `block_size` tokens before it, so it has context as in training. A dependency or attractor
//! whose earlier word starts before the window is left out (counted in `dropped`), as are
//! words that start before it as candidates for the most-attended word.

use std::collections::BTreeMap;
use std::ops::Range;

use burn::module::Param;
use burn::tensor::activation::log_softmax;
use burn::tensor::{Device, Tensor, TensorData};
use headlab_data::syntax::{
    Agreement, Arc, BASELINE_MAX_OFFSET, Baseline, Construction, Relation, Syntax, SyntaxError,
    fixed_offset_baseline, parse_syntax, parse_text,
};
use headlab_data::{Dataset, Split, Tokenizer, TokenizerError, TokenizerKind, ids_tensor};
use headlab_kernels::to_host;
use headlab_model::{ForwardOptions, Gpt};
use headlab_train::grammar::grammaticality;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde::Serialize;

/// A head: `(layer, head)`.
pub type HeadId = (usize, usize);

/// Rows of one forward pass: enough to keep a small model busy, little enough memory for
/// `[rows, n_heads, t, t]` weights.
const BATCH_ROWS: usize = 32;

/// Why syntactic scores cannot be computed.
#[derive(Debug, thiserror::Error)]
pub enum SyntaxScoreError {
    #[error(transparent)]
    Syntax(#[from] SyntaxError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the tokens of the text decode to {decoded} bytes but the text has {text}")]
    Tokens { decoded: usize, text: usize },
    #[error("no head {layer}.{head}: the model has {n_layers} layers of {n_heads} heads")]
    Head {
        layer: usize,
        head: usize,
        n_layers: usize,
        n_heads: usize,
    },
}

/// A grammar text, its parse, and its tokens with each word's unit.
#[derive(Debug, Clone)]
pub struct SyntaxProbe {
    pub text: String,
    pub syntax: Syntax,
    /// The text's tokens.
    pub ids: Vec<u32>,
    /// The byte offset each token starts at, and the text's length last (`ids.len() + 1`).
    pub starts: Vec<usize>,
    /// Per word of `syntax.words`: the tokens of its unit (see the module's doc).
    pub units: Vec<Range<usize>>,
}

impl SyntaxProbe {
    /// Parses and tokenizes `text` (whole sentences of the grammar corpus, e.g. from
    /// [`headlab_data::corpus::grammar`] with a seed the run did not train on).
    pub fn new(tokenizer: &Tokenizer, text: &str) -> Result<Self, SyntaxScoreError> {
        let syntax = parse_text(text)?;
        let ids = tokenizer.encode(text)?;
        let mut starts = Vec::with_capacity(ids.len() + 1);
        let mut at = 0;
        for &id in &ids {
            starts.push(at);
            at += tokenizer.decode_token_bytes(&[id]).len();
        }
        starts.push(at);
        if at != text.len() {
            return Err(SyntaxScoreError::Tokens {
                decoded: at,
                text: text.len(),
            });
        }
        let mut probe = Self {
            text: text.to_string(),
            syntax,
            ids,
            starts,
            units: Vec::new(),
        };
        let words = &probe.syntax.words;
        probe.units = words
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let first = probe.token_at(w.start);
                let boundary = probe.token_at(w.end);
                // The boundary's token belongs to the next word when it reaches into it.
                let next = words.get(i + 1).map_or(usize::MAX, |n| n.start);
                let last = if probe.starts[boundary + 1] > next && boundary > first {
                    boundary - 1
                } else {
                    boundary
                };
                first..last + 1
            })
            .collect();
        Ok(probe)
    }

    /// The token holding byte `at`.
    pub fn token_at(&self, at: usize) -> usize {
        self.starts.partition_point(|&s| s <= at) - 1
    }

    /// The query of an agreement: the last token that ends at or before the place the verb's
    /// number is written, the position whose next token still may be either form (the stem's
    /// last character, [`Agreement::decision_at`], for a char-level model).
    pub fn decision_token(&self, agreement: &Agreement) -> usize {
        self.token_at(agreement.number_at) - 1
    }

    /// The window of sentence `s`: the tokens up to and including its ".", at most `block_size`.
    fn window(&self, s: usize, block_size: usize) -> Range<usize> {
        let end = self.token_at(self.syntax.sentences[s].bytes.end - 1) + 1;
        end.saturating_sub(block_size)..end
    }
}

/// The most sentences of a run's val split that syntactic heads are measured on: a few
/// seconds on the default run, at the end and at every tracked step alike.
pub const MAX_SENTENCES: usize = 300;
/// Val tokens decoded to find them: more than [`MAX_SENTENCES`] of the longest sentences.
const MAX_TOKENS: usize = 40_000;

/// The start of `text` cut to whole sentences of the grammar: from after its first "." (the
/// sentence a split may have cut into, or a whole one when it did not) to the end of the
/// `max`th sentence after it, or of the last whole one before the text ends or a sentence
/// does not parse. The text and its sentence count.
pub fn whole_sentences(text: &str, max: usize) -> (&str, usize) {
    let Some(first) = text.find('.') else {
        return ("", 0);
    };
    let body = text[first + 1..].trim_start();
    let (mut end, mut n) = (0, 0);
    while n < max {
        let Some(dot) = body[end..].find('.') else {
            break;
        };
        let next = end + dot + 1;
        if parse_syntax(&body[end..next]).is_err() {
            break;
        }
        (end, n) = (next, n + 1);
    }
    (&body[..end], n)
}

/// The probe of a grammar run: the start of its val split cut to at most `max` whole
/// sentences ([`whole_sentences`]), and how many; `None` when the split holds none.
pub fn val_probe(
    data: &Dataset,
    tokenizer: &Tokenizer,
    max: usize,
) -> Result<Option<(SyntaxProbe, usize)>, SyntaxScoreError> {
    let val = data.tokens(Split::Val);
    let decoded = tokenizer.decode(&val.to_vec(0..val.len().min(MAX_TOKENS)));
    let (text, sentences) = whole_sentences(&decoded, max);
    if sentences == 0 {
        return Ok(None);
    }
    Ok(Some((SyntaxProbe::new(tokenizer, text)?, sentences)))
}

/// One head on one relation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RelationScore {
    pub layer: usize,
    pub head: usize,
    pub relation: Relation,
    /// Arcs scored.
    pub n: usize,
    /// Share of arcs whose later word attends most to the earlier one (its unit's attention
    /// summed, against every other word's).
    pub accuracy: f64,
    /// Mean attention on the related word's unit.
    pub mass: f64,
    /// The best fixed-offset rule on the same arcs.
    pub baseline: Baseline,
}

/// One head at the verbs' number: where it looks when the next character writes it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AgreementScore {
    pub layer: usize,
    pub head: usize,
    /// Verbs with an attractor scored.
    pub n: usize,
    /// Mean attention on the subject's unit.
    pub subject_mass: f64,
    /// Mean attention on the attractor's unit.
    pub attractor_mass: f64,
    /// Share of verbs where the subject gets more than the attractor.
    pub subject_share: f64,
}

/// Every head's syntactic scores on a probe.
#[derive(Debug, Clone, Serialize)]
pub struct SyntaxScores {
    /// Per head (layer-major), per relation in [`Relation::ALL`]'s order.
    pub relations: Vec<RelationScore>,
    /// Per head (layer-major), over the verbs that have an attractor.
    pub agreement: Vec<AgreementScore>,
    /// Arcs and agreements left out because their earlier word starts before the window.
    pub dropped: usize,
}

/// Running sums of one head.
#[derive(Debug, Clone, Default)]
struct Sums {
    /// Per relation: arcs, hits, mass.
    relations: BTreeMap<Relation, (usize, usize, f64)>,
    /// Verbs, subject mass, attractor mass, subject wins.
    agreement: (usize, f64, f64, usize),
}

/// Per sequence, indices grouped by length in batches of at most [`BATCH_ROWS`], in a fixed
/// order (lengths ascending, then index).
fn batches(lengths: &[usize]) -> Vec<Vec<usize>> {
    let mut by_len: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (i, &len) in lengths.iter().enumerate() {
        by_len.entry(len).or_default().push(i);
    }
    by_len
        .into_values()
        .flat_map(|v| v.chunks(BATCH_ROWS).map(|c| c.to_vec()).collect::<Vec<_>>())
        .collect()
}

/// Scores every head on every relation and at every verb with an attractor.
pub fn syntax_scores(model: &Gpt, probe: &SyntaxProbe, device: &Device) -> SyntaxScores {
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    let syntax = &probe.syntax;
    let n_sentences = syntax.sentences.len();
    let windows: Vec<Range<usize>> = (0..n_sentences)
        .map(|s| probe.window(s, model.config.block_size))
        .collect();
    let mut arcs_of: Vec<Vec<&Arc>> = vec![Vec::new(); n_sentences];
    for arc in &syntax.arcs {
        arcs_of[syntax.words[arc.from].sentence].push(arc);
    }
    let mut agreements_of: Vec<Vec<&Agreement>> = vec![Vec::new(); n_sentences];
    for a in syntax.agreements.iter().filter(|a| a.attractor.is_some()) {
        agreements_of[syntax.words[a.verb].sentence].push(a);
    }

    let mut sums = vec![Sums::default(); n_layers * n_heads];
    let mut kept: Vec<Arc> = Vec::new();
    let mut dropped = 0;
    let lengths: Vec<usize> = windows.iter().map(|w| w.len()).collect();
    for batch in batches(&lengths) {
        let t = lengths[batch[0]];
        let tokens: Vec<u32> = batch
            .iter()
            .flat_map(|&s| probe.ids[windows[s].clone()].to_vec())
            .collect();
        let out = model.forward_with(
            ids_tensor(&tokens, batch.len(), t, device),
            ForwardOptions {
                return_weights: true,
                ..ForwardOptions::default()
            },
        );
        // One [b, h, t, t] per layer, row-major on the host.
        let weights: Vec<Vec<f32>> = out.weights.into_iter().map(to_host::<f32, 4>).collect();
        for (row, &s) in batch.iter().enumerate() {
            let window = &windows[s];
            // Words whose unit starts inside the window: the candidates.
            let first_word = probe.units.partition_point(|u| u.start < window.start);
            let in_window = |word: usize| word >= first_word;
            for (layer, w) in weights.iter().enumerate() {
                for head in 0..n_heads {
                    // A[q, j] of this head, q and j token indices of the text.
                    let at = |q: usize, j: usize| {
                        let (q, j) = (q - window.start, j - window.start);
                        w[((row * n_heads + head) * t + q) * t + j] as f64
                    };
                    // Attention from token q on a word's unit (the part at or before q).
                    let mass = |q: usize, word: usize| {
                        let u = &probe.units[word];
                        (u.start..u.end.min(q + 1)).map(|j| at(q, j)).sum::<f64>()
                    };
                    let sums = &mut sums[layer * n_heads + head];
                    for arc in arcs_of[s].iter().filter(|a| in_window(a.to)) {
                        let q = probe.units[arc.from].end - 1;
                        // The most-attended word: the first of the largest.
                        let mut best = (first_word, f64::NEG_INFINITY);
                        for word in first_word..=arc.from {
                            let m = mass(q, word);
                            if m > best.1 {
                                best = (word, m);
                            }
                        }
                        let e = sums.relations.entry(arc.relation).or_default();
                        e.0 += 1;
                        e.1 += usize::from(best.0 == arc.to);
                        e.2 += mass(q, arc.to);
                    }
                    for a in agreements_of[s].iter() {
                        let attractor = a.attractor.expect("filtered");
                        if !(in_window(a.subject) && in_window(attractor)) {
                            continue;
                        }
                        let q = probe.decision_token(a);
                        let (subject, attractor) = (mass(q, a.subject), mass(q, attractor));
                        let g = &mut sums.agreement;
                        g.0 += 1;
                        g.1 += subject;
                        g.2 += attractor;
                        g.3 += usize::from(subject > attractor);
                    }
                }
            }
            kept.extend(arcs_of[s].iter().filter(|a| in_window(a.to)).copied());
            dropped += arcs_of[s].len() - arcs_of[s].iter().filter(|a| in_window(a.to)).count();
            dropped += agreements_of[s]
                .iter()
                .filter(|a| !(in_window(a.subject) && in_window(a.attractor.expect("filtered"))))
                .count();
        }
    }

    let baselines = Relation::ALL.map(|r| fixed_offset_baseline(r, &kept, BASELINE_MAX_OFFSET));
    let share = |x: f64, n: usize| if n == 0 { 0.0 } else { x / n as f64 };
    let mut relations = Vec::new();
    let mut agreement = Vec::new();
    for (i, s) in sums.iter().enumerate() {
        let (layer, head) = (i / n_heads, i % n_heads);
        for (r, baseline) in Relation::ALL.into_iter().zip(baselines) {
            let (n, hits, mass) = s.relations.get(&r).copied().unwrap_or_default();
            relations.push(RelationScore {
                layer,
                head,
                relation: r,
                n,
                accuracy: share(hits as f64, n),
                mass: share(mass, n),
                baseline,
            });
        }
        let (n, subject, attractor, wins) = s.agreement;
        agreement.push(AgreementScore {
            layer,
            head,
            n,
            subject_mass: share(subject, n),
            attractor_mass: share(attractor, n),
            subject_share: share(wins as f64, n),
        });
    }
    SyntaxScores {
        relations,
        agreement,
        dropped,
    }
}

/// File name of the syntactic scores through training in a grammar run's directory.
pub const SYNTAX_HISTORY_FILE: &str = "syntax_history.csv";

/// Header of [`SYNTAX_HISTORY_FILE`]: per tracked step and head, the mean attention on the
/// verb's subject and on its attractor where the verb writes its number, the head's accuracy
/// on each relation of [`Relation::ALL`], and that relation's fixed-offset baseline (the same
/// on every row: it depends on the text only).
pub const SYNTAX_HISTORY_HEADER: &str = "step,layer,head,subject_mass,attractor_mass,subject,\
determiner,antecedent,object,preposition,subject_baseline,determiner_baseline,\
antecedent_baseline,object_baseline,preposition_baseline\n";

/// The values of one [`SYNTAX_HISTORY_FILE`] row after `step,layer,head`, in the header's
/// order.
pub type SyntaxPoint = [f64; 2 + 2 * Relation::ALL.len()];

/// The names of a [`SyntaxPoint`]'s values, as the header has them.
pub fn syntax_point_names() -> Vec<String> {
    SYNTAX_HISTORY_HEADER
        .trim_end()
        .split(',')
        .skip(3)
        .map(str::to_string)
        .collect()
}

impl SyntaxScores {
    /// Every head's [`SyntaxPoint`], layer-major.
    pub fn points(&self) -> Vec<SyntaxPoint> {
        let n = Relation::ALL.len();
        self.agreement
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let mut p = [0.0; 2 + 2 * Relation::ALL.len()];
                p[0] = a.subject_mass;
                p[1] = a.attractor_mass;
                for (k, r) in self.relations[i * n..(i + 1) * n].iter().enumerate() {
                    p[2 + k] = r.accuracy;
                    p[2 + n + k] = r.baseline.accuracy;
                }
                p
            })
            .collect()
    }

    /// The [`SYNTAX_HISTORY_FILE`] rows of step `step`.
    pub fn history_rows(&self, step: usize) -> String {
        let mut out = String::new();
        for (a, p) in self.agreement.iter().zip(self.points()) {
            out.push_str(&format!("{step},{},{}", a.layer, a.head));
            for v in p {
                out.push_str(&format!(",{v:.4}"));
            }
            out.push('\n');
        }
        out
    }
}

/// [`SYNTAX_HISTORY_FILE`] read back: per step (ascending), each head's point, layer-major.
/// Rows that do not parse are skipped.
pub fn parse_syntax_history(text: &str) -> Vec<(usize, Vec<SyntaxPoint>)> {
    let mut out: Vec<(usize, Vec<SyntaxPoint>)> = Vec::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let Some(step) = f.first().and_then(|v| v.parse::<usize>().ok()) else {
            continue;
        };
        let values: Vec<f64> = f.iter().skip(3).filter_map(|v| v.parse().ok()).collect();
        let Ok(point) = SyntaxPoint::try_from(values) else {
            continue;
        };
        match out.last_mut() {
            Some((s, points)) if *s == step => points.push(point),
            _ => out.push((step, vec![point])),
        }
    }
    out
}

/// How far a head's accuracy must exceed the fixed-offset baseline to earn a relation's
/// label: 0.15 absolute. Clark et al.'s best heads beat the baseline by 0.1 to 0.5 on the
/// relations they name; 0.15 keeps a head that merely looks one word back (which the
/// baseline already does) from being named for a relation that is often one word back.
pub const ROLE_MARGIN: f64 = 0.15;
/// The fewest arcs a label is drawn from: fewer are noise.
pub const ROLE_MIN_ARCS: usize = 20;

/// The syntactic roles of one head.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyntaxRoles {
    pub layer: usize,
    pub head: usize,
    /// The relations whose accuracy beats the baseline by [`ROLE_MARGIN`] over at least
    /// [`ROLE_MIN_ARCS`] arcs, in [`Relation::ALL`]'s order (`subject`, `determiner`, ...).
    pub roles: Vec<Relation>,
}

/// Every head's syntactic roles, layer-major.
pub fn syntax_roles(scores: &SyntaxScores) -> Vec<SyntaxRoles> {
    let mut out: Vec<SyntaxRoles> = Vec::new();
    for r in &scores.relations {
        if out
            .last()
            .is_none_or(|o| (o.layer, o.head) != (r.layer, r.head))
        {
            out.push(SyntaxRoles {
                layer: r.layer,
                head: r.head,
                roles: Vec::new(),
            });
        }
        if r.n >= ROLE_MIN_ARCS && r.accuracy >= r.baseline.accuracy + ROLE_MARGIN {
            out.last_mut().expect("pushed").roles.push(r.relation);
        }
    }
    out
}

/// The heads that look at the subject rather than the attractor where the verb's number is
/// written: more attention on the subject than on the attractor at more than `min_share` of
/// the verbs, and at least `margin` more on average, most subject mass first. The candidates
/// to ablate in [`ablation_sweep`]. (On the default run heads 1.1 and 1.2 prefer the subject
/// at 0.70 and 0.53 of the verbs, at masses 0.34 and 0.22 against 0.16 and 0.14; every other
/// head prefers the attractor at most verbs. The margin keeps the near-uniform heads of an
/// untrained model, whose preference is a coin toss, from all counting.)
pub fn subject_trackers(scores: &SyntaxScores, min_share: f64, margin: f64) -> Vec<HeadId> {
    let mut heads: Vec<&AgreementScore> = scores
        .agreement
        .iter()
        .filter(|a| {
            a.n > 0 && a.subject_share > min_share && a.subject_mass >= a.attractor_mass + margin
        })
        .collect();
    heads.sort_by(|a, b| b.subject_mass.total_cmp(&a.subject_mass));
    heads.iter().map(|a| (a.layer, a.head)).collect()
}

/// One verb of the forced choice.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Choice {
    /// Its index into the probe's `syntax.agreements`.
    pub agreement: usize,
    /// `log p` of the agreeing form and its boundary, from where the forms part.
    pub right: f64,
    /// The same for the other form.
    pub wrong: f64,
}

/// The forced choice over a probe's verbs whose attractor differs from the subject in number.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ForcedChoice {
    /// The heads zeroed.
    pub ablated: Vec<HeadId>,
    /// Verbs asked.
    pub n: usize,
    /// Share with `right > wrong`: 0.5 is chance.
    pub accuracy: f64,
    /// Mean of `p(right) / (p(right) + p(wrong))`.
    pub mean_p_right: f64,
    /// The same choices split by what stands between subject and verb, in
    /// [`Construction::ALL`]'s order.
    pub by_construction: Vec<ConstructionChoice>,
    pub choices: Vec<Choice>,
}

/// The forced choice over the verbs of one [`Construction`].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ConstructionChoice {
    /// What stands between subject and verb.
    pub construction: Construction,
    /// Verbs asked.
    pub n: usize,
    /// Share chosen right; NaN with none asked.
    pub accuracy: f64,
}

/// Every head of `heads` exists in `model`.
fn check_heads(model: &Gpt, heads: &[HeadId]) -> Result<(), SyntaxScoreError> {
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    match heads.iter().find(|&&(l, h)| l >= n_layers || h >= n_heads) {
        Some(&(layer, head)) => Err(SyntaxScoreError::Head {
            layer,
            head,
            n_layers,
            n_heads,
        }),
        None => Ok(()),
    }
}

/// `[n_layers, n_heads]` ones with the `ablate` heads at 0.
fn head_mask(
    model: &Gpt,
    ablate: &[HeadId],
    device: &Device,
) -> Result<Tensor<2>, SyntaxScoreError> {
    check_heads(model, ablate)?;
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    let mut m = vec![1.0f32; n_layers * n_heads];
    for &(layer, head) in ablate {
        m[layer * n_heads + head] = 0.0;
    }
    Ok(Tensor::from_data(
        TensorData::new(m, [n_layers, n_heads]),
        device,
    ))
}

/// The agreement test: for every verb whose attractor differs in number from its subject,
/// the text up to the verb with the agreeing form and with the other, each followed by the
/// verb's boundary ("runs." against "run."), scored by `log p` of the tokens from where the
/// two part (for a char-level model: `log p("s") + log p(".")` after "run" against
/// `log p(".")`). The boundary makes the plural form a whole word rather than a prefix of
/// the singular; a word tokenizer needs none (" runs" against " run", one token each). The heads in `ablate` are zeroed (the model's head mask). The context is the
/// probe's text before the verb, up to `block_size` tokens in all.
pub fn forced_choice(
    model: &Gpt,
    tokenizer: &Tokenizer,
    probe: &SyntaxProbe,
    ablate: &[HeadId],
    device: &Device,
) -> Result<ForcedChoice, SyntaxScoreError> {
    let options = ForwardOptions {
        head_mask: Some(head_mask(model, ablate, device)?),
        ..ForwardOptions::default()
    };
    let words = &probe.syntax.words;
    let block = model.config.block_size;
    // Per verb: two sequences (inputs) and the tail tokens each is scored on.
    let mut items = Vec::new();
    let mut seqs: Vec<Vec<u32>> = Vec::new();
    let mut tails: Vec<Vec<u32>> = Vec::new();
    for (i, a) in probe.syntax.agreements.iter().enumerate() {
        if !a.attractor_mismatch(words) {
            continue;
        }
        let verb = &words[a.verb];
        // The token holding the verb's first byte may hold the space before it (BPE).
        let c = probe.token_at(verb.start);
        let lead = &probe.text[probe.starts[c]..verb.start];
        // A word tokenizer's verb is one whole token, and a lone space is no word of its
        // vocabulary: its choice is between the two verb tokens alone.
        let boundary = match tokenizer.kind() {
            TokenizerKind::Word => "",
            _ => &probe.text[verb.end..verb.end + 1],
        };
        let encode =
            |plural: bool| tokenizer.encode(&format!("{lead}{}{boundary}", a.forms.form(plural)));
        let (right, wrong) = (encode(a.subject_plural)?, encode(!a.subject_plural)?);
        let shared = right.iter().zip(&wrong).take_while(|(x, y)| x == y).count();
        for tail in [&right, &wrong] {
            // [context..., shared..., tail...] less its last token, the last `block` of it.
            let mut seq: Vec<u32> = probe.ids[..c].to_vec();
            seq.extend_from_slice(&tail[..tail.len() - 1]);
            let cut = seq.len().saturating_sub(block);
            seqs.push(seq[cut..].to_vec());
            tails.push(tail[shared..].to_vec());
        }
        items.push(i);
    }
    let lengths: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
    let mut log_p = vec![0.0f64; seqs.len()];
    for batch in batches(&lengths) {
        let t = lengths[batch[0]];
        let tokens: Vec<u32> = batch.iter().flat_map(|&s| seqs[s].clone()).collect();
        let logits = model
            .forward_with(ids_tensor(&tokens, batch.len(), t, device), options.clone())
            .logits;
        let v = logits.dims()[2];
        // [b, t, v] log-probabilities, row-major on the host.
        let lp = to_host::<f32, 3>(log_softmax(logits, 2));
        for (row, &s) in batch.iter().enumerate() {
            // The tail's k-th token is predicted at position t - len + k.
            let tail = &tails[s];
            log_p[s] = tail
                .iter()
                .enumerate()
                .map(|(k, &id)| lp[(row * t + t - tail.len() + k) * v + id as usize] as f64)
                .sum();
        }
    }
    let choices: Vec<Choice> = items
        .iter()
        .enumerate()
        .map(|(k, &agreement)| Choice {
            agreement,
            right: log_p[2 * k],
            wrong: log_p[2 * k + 1],
        })
        .collect();
    let n = choices.len();
    let mean = |f: &dyn Fn(&Choice) -> f64| {
        if n == 0 {
            0.0
        } else {
            choices.iter().map(f).sum::<f64>() / n as f64
        }
    };
    let by_construction = Construction::ALL
        .iter()
        .map(|&construction| {
            let of: Vec<&Choice> = choices
                .iter()
                .filter(|c| {
                    probe.syntax.agreements[c.agreement].construction(words) == construction
                })
                .collect();
            let right = of.iter().filter(|c| c.right > c.wrong).count();
            ConstructionChoice {
                construction,
                n: of.len(),
                accuracy: if of.is_empty() {
                    f64::NAN
                } else {
                    right as f64 / of.len() as f64
                },
            }
        })
        .collect();
    Ok(ForcedChoice {
        ablated: ablate.to_vec(),
        n,
        accuracy: mean(&|c| f64::from(u8::from(c.right > c.wrong))),
        // p / (p + q) = 1 / (1 + exp(log q - log p)).
        mean_p_right: mean(&|c| 1.0 / (1.0 + (c.wrong - c.right).exp())),
        by_construction,
        choices,
    })
}

/// Which heads a row of [`ablation_sweep`] zeroes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AblationKind {
    /// None: the model as trained.
    Intact,
    /// One or all of the tracked heads.
    Tracked,
    /// As many other heads as there are tracked ones.
    Control,
    /// The syntactic head alone ([`layer_sweep`]).
    Syntactic,
    /// Another head of the syntactic head's layer alone ([`layer_sweep`]).
    SameLayer,
}

/// One row of [`ablation_sweep`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AblationRow {
    pub kind: AblationKind,
    pub result: ForcedChoice,
    /// What the model writes with the same heads zeroed: sentences sampled and parsed by the
    /// grammar checker ([`sampled_agreement`]); `None` when the sweep sampled none.
    pub sampled: Option<Sampled>,
}

/// Sentences sampled from a model and checked by the corpus's parser.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sampled {
    /// Sentences sampled.
    pub sentences: usize,
    /// Share with the grammar's structure.
    pub well_formed: f64,
    /// Share well-formed with every determiner and verb agreeing.
    pub agreeing: f64,
    /// In the well-formed ones, per construction ([`Construction::ALL`]'s order): verbs, and
    /// of them those that agree.
    pub by_construction: [(usize, usize); 3],
}

impl Sampled {
    /// The share of the well-formed sentences that agree: what ablation does to agreement
    /// itself, apart from breaking the sentences (NaN when none is well-formed).
    pub fn agreeing_if_formed(&self) -> f64 {
        if self.well_formed > 0.0 {
            self.agreeing / self.well_formed
        } else {
            f64::NAN
        }
    }
}

/// `model` with the heads `ablate` removed for good: their rows of W_O zeroed (W_O is
/// `[n_heads * d_k, d_model]`, head h's output meets rows `h d_k..(h + 1) d_k`), which is
/// what a head mask of 0 does, as weights. For what takes no head mask: sampling.
pub fn without_heads(model: &Gpt, ablate: &[HeadId]) -> Result<Gpt, SyntaxScoreError> {
    check_heads(model, ablate)?;
    let d_k = model.config.d_k();
    let mut out = model.clone();
    for &(layer, head) in ablate {
        let o = &mut out.blocks[layer].attn.o_proj;
        let w = o.weight.val();
        let [_, d_out] = w.dims();
        let zeros = Tensor::<2>::zeros([d_k, d_out], &w.device());
        o.weight =
            Param::from_tensor(w.slice_assign([head * d_k..(head + 1) * d_k, 0..d_out], zeros));
    }
    Ok(out)
}

/// `n` sentences sampled (seeded) from `model` with the heads `ablate` zeroed, parsed by
/// the grammar ([`headlab_train::grammar::grammaticality`]); `None` where the tokenizer
/// cannot sample sentences (no single token for "." or a newline) or `n` is 0.
pub fn sampled_agreement(
    model: &Gpt,
    tokenizer: &Tokenizer,
    ablate: &[HeadId],
    n: usize,
    seed: u64,
) -> Result<Option<Sampled>, SyntaxScoreError> {
    let model = without_heads(model, ablate)?;
    Ok(grammaticality(&model, tokenizer, n, seed).map(|g| Sampled {
        sentences: g.sentences,
        well_formed: g.well_formed,
        agreeing: g.agreeing,
        by_construction: g.by_construction,
    }))
}

/// The causal test: the forced choice intact, with each tracked head zeroed alone, with all
/// of them zeroed together (heads can be redundant: on the default run heads 1.1 and 1.2 each
/// alone leave agreement at 0.95 and 1.00, both together at chance), and with sets of as
/// many other heads of the trackers' layers (of any layer when those are too few): all of
/// them when there are at most `max_controls`, else `max_controls` drawn at random from a
/// fixed seed ([`control_sets`]). With `sample.0 > 0`, every row also samples that
/// many sentences (seed `sample.1`) with its heads zeroed and parses them
/// ([`sampled_agreement`]). Deterministic.
pub fn ablation_sweep(
    model: &Gpt,
    tokenizer: &Tokenizer,
    probe: &SyntaxProbe,
    tracked: &[HeadId],
    max_controls: usize,
    sample: (usize, u64),
    device: &Device,
) -> Result<Vec<AblationRow>, SyntaxScoreError> {
    let run = |kind, heads: &[HeadId]| -> Result<AblationRow, SyntaxScoreError> {
        Ok(AblationRow {
            kind,
            result: forced_choice(model, tokenizer, probe, heads, device)?,
            sampled: sampled_agreement(model, tokenizer, heads, sample.0, sample.1)?,
        })
    };
    let mut rows = vec![run(AblationKind::Intact, &[])?];
    for &h in tracked {
        rows.push(run(AblationKind::Tracked, &[h])?);
    }
    if tracked.len() > 1 {
        rows.push(run(AblationKind::Tracked, tracked)?);
    }
    // Controls come from the trackers' own layers where they hold enough other heads: a
    // layer-0 head's output is what every later layer reads, so zeroing it breaks the
    // sentences (on the default run any pair with one leaves 0-2% of samples well-formed)
    // and says nothing of agreement in particular.
    let all: Vec<HeadId> = (0..model.config.n_layers)
        .flat_map(|l| (0..model.config.n_heads).map(move |h| (l, h)))
        .filter(|h| !tracked.contains(h))
        .collect();
    let same_layers: Vec<HeadId> = all
        .iter()
        .copied()
        .filter(|&(l, _)| tracked.iter().any(|&(t, _)| t == l))
        .collect();
    let others = if same_layers.len() >= tracked.len() {
        same_layers
    } else {
        all
    };
    for set in control_sets(others.len(), tracked.len(), max_controls) {
        let heads: Vec<HeadId> = set.iter().map(|&i| others[i]).collect();
        rows.push(run(AblationKind::Control, &heads)?);
    }
    Ok(rows)
}

/// The syntactic head `head` zeroed alone, then each other head of its layer alone, in head
/// order: whether it, rather than any head beside it, carries agreement. Rows as
/// [`ablation_sweep`]'s (no intact row); a head already zeroed alone in `known` (rows of the
/// same probe and sampling) is taken from there, not measured again.
pub fn layer_sweep(
    model: &Gpt,
    tokenizer: &Tokenizer,
    probe: &SyntaxProbe,
    head: HeadId,
    sample: (usize, u64),
    known: &[AblationRow],
    device: &Device,
) -> Result<Vec<AblationRow>, SyntaxScoreError> {
    check_heads(model, &[head])?;
    let others = (0..model.config.n_heads)
        .map(|h| (head.0, h))
        .filter(|&h| h != head);
    std::iter::once(head)
        .chain(others)
        .map(|h| {
            let kind = if h == head {
                AblationKind::Syntactic
            } else {
                AblationKind::SameLayer
            };
            if let Some(row) = known.iter().find(|r| r.result.ablated == [h]) {
                return Ok(AblationRow {
                    kind,
                    ..row.clone()
                });
            }
            Ok(AblationRow {
                kind,
                result: forced_choice(model, tokenizer, probe, &[h], device)?,
                sampled: sampled_agreement(model, tokenizer, &[h], sample.0, sample.1)?,
            })
        })
        .collect()
}

/// `max` distinct `k`-subsets of `0..n`: all of them in lexicographic order when there are
/// at most `max`, else drawn at random from a fixed seed (so they spread over the candidates
/// instead of taking the first heads'), each sorted, in the order drawn.
fn control_sets(n: usize, k: usize, max: usize) -> Vec<Vec<usize>> {
    let all = combinations(n, k, max + 1);
    if all.len() <= max {
        return all;
    }
    let mut rng = StdRng::seed_from_u64(CONTROL_SEED);
    let mut out: Vec<Vec<usize>> = Vec::new();
    // Far more tries than needed: C(n, k) > max distinct sets exist.
    for _ in 0..1000 * max {
        if out.len() == max {
            break;
        }
        let mut pool: Vec<usize> = (0..n).collect();
        pool.shuffle(&mut rng);
        let mut set = pool[..k].to_vec();
        set.sort_unstable();
        if !out.contains(&set) {
            out.push(set);
        }
    }
    out
}

/// The seed of [`control_sets`]' draw.
const CONTROL_SEED: u64 = 0x5eed_c0de;

/// The first `max` `k`-subsets of `0..n` in lexicographic order (never more are built).
fn combinations(n: usize, k: usize, max: usize) -> Vec<Vec<usize>> {
    if k == 0 || k > n {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut c: Vec<usize> = (0..k).collect();
    while out.len() < max {
        out.push(c.clone());
        // The rightmost index that can still move right.
        let Some(i) = (0..k).rev().find(|&i| c[i] < n - k + i) else {
            return out;
        };
        c[i] += 1;
        for j in i + 1..k {
            c[j] = c[j - 1] + 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use headlab_model::GptConfig;

    /// Two hand-parsed sentences, 59 characters:
    /// `the dog near the cats runs. some men that see a bird sleep.`
    const TEXT: &str = "the dog near the cats runs. some men that see a bird sleep.";

    /// Every word's `(start, end)` counted by hand; `end` is the boundary's offset.
    const SPANS: [(usize, usize); 13] = [
        (0, 3),   // 0 the
        (4, 7),   // 1 dog
        (8, 12),  // 2 near
        (13, 16), // 3 the
        (17, 21), // 4 cats
        (22, 26), // 5 runs
        (28, 32), // 6 some
        (33, 36), // 7 men
        (37, 41), // 8 that
        (42, 45), // 9 see
        (46, 47), // 10 a
        (48, 52), // 11 bird
        (53, 58), // 12 sleep
    ];

    /// The arcs by hand: `(relation, from, to, the offset one past the sentence's ".")`.
    fn arcs() -> Vec<(Relation, usize, usize, usize)> {
        use Relation::*;
        vec![
            (Determiner, 1, 0, 27),
            (Determiner, 4, 3, 27),
            (Preposition, 4, 2, 27),
            (Subject, 5, 1, 27),
            (Determiner, 7, 6, 59),
            (Subject, 9, 7, 59),
            (Antecedent, 9, 7, 59),
            (Determiner, 11, 10, 59),
            (Object, 11, 9, 59),
            (Subject, 12, 7, 59),
        ]
    }

    fn setup() -> (Gpt, Tokenizer, SyntaxProbe, Device) {
        let device = Device::flex();
        device.seed(11);
        let tokenizer = Tokenizer::char_from_corpus(TEXT).unwrap();
        let config = GptConfig {
            vocab_size: tokenizer.vocab_size(),
            block_size: 64,
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            ..GptConfig::default()
        };
        let model = Gpt::new(&config, &device).unwrap();
        let probe = SyntaxProbe::new(&tokenizer, TEXT).unwrap();
        (model, tokenizer, probe, device)
    }

    /// Attention weights of `text` read entry by entry: `[layer][head][q][j]`.
    fn weights(
        model: &Gpt,
        tokenizer: &Tokenizer,
        text: &str,
        device: &Device,
    ) -> Vec<Vec<Vec<Vec<f64>>>> {
        let ids = tokenizer.encode(text).unwrap();
        let t = ids.len();
        let out = model.forward_with(
            ids_tensor(&ids, 1, t, device),
            ForwardOptions {
                return_weights: true,
                ..ForwardOptions::default()
            },
        );
        out.weights
            .into_iter()
            .map(|w| {
                let w = to_host::<f32, 4>(w);
                let h = w.len() / (t * t);
                (0..h)
                    .map(|head| {
                        (0..t)
                            .map(|q| (0..t).map(|j| w[(head * t + q) * t + j] as f64).collect())
                            .collect()
                    })
                    .collect()
            })
            .collect()
    }

    /// Attention of row `a` on word `w`'s characters and boundary, up to `q`.
    fn on_word(a: &[f64], q: usize, w: usize) -> f64 {
        let (start, end) = SPANS[w];
        (start..=end.min(q)).map(|j| a[j]).sum()
    }

    /// Accuracy and mass of every head and relation, and the agreement masses, set against
    /// the attention read by hand: each sentence run alone up to its "." (the whole text
    /// fits the context, so its window starts at 0), the query at the boundary after the
    /// later word, mass summed over the hand-counted spans.
    #[test]
    fn scores_match_attention_read_by_hand() {
        let (model, tokenizer, probe, device) = setup();
        let scores = syntax_scores(&model, &probe, &device);
        assert_eq!(scores.dropped, 0);
        let by_sentence = [27, 59].map(|end| weights(&model, &tokenizer, &TEXT[..end], &device));
        for s in &scores.relations {
            let (mut n, mut hits, mut mass) = (0, 0, 0.0);
            for (relation, from, to, end) in arcs() {
                if relation != s.relation {
                    continue;
                }
                let a = &by_sentence[usize::from(end == 59)][s.layer][s.head];
                let q = SPANS[from].1;
                let row = &a[q];
                let masses: Vec<f64> = (0..=from).map(|w| on_word(row, q, w)).collect();
                let mut best = 0;
                for w in 1..masses.len() {
                    if masses[w] > masses[best] {
                        best = w;
                    }
                }
                n += 1;
                hits += usize::from(best == to);
                mass += masses[to];
            }
            let what = format!("{}.{} {}", s.layer, s.head, s.relation);
            assert_eq!(s.n, n, "{what}");
            if n > 0 {
                assert!(
                    (s.accuracy - hits as f64 / n as f64).abs() < 1e-12,
                    "{what}"
                );
                assert!(
                    (s.mass - mass / n as f64).abs() < 1e-5,
                    "{what}: {} vs {}",
                    s.mass,
                    mass / n as f64
                );
            }
        }
        // Agreement: "runs" (stem "run" ends at 24; subject "dog", attractor "cats") and
        // "sleep" (stem "sleep" ends at 57; subject "men", attractor "bird"). "see" has none.
        for g in &scores.agreement {
            let cases = [(0, 24, 1, 4), (1, 57, 7, 11)];
            let (mut subject, mut attractor) = (0.0, 0.0);
            for (sentence, q, sub, att) in cases {
                let row = &by_sentence[sentence][g.layer][g.head][q];
                subject += on_word(row, q, sub) / 2.0;
                attractor += on_word(row, q, att) / 2.0;
            }
            assert_eq!(g.n, 2);
            assert!(
                (g.subject_mass - subject).abs() < 1e-5,
                "{g:?} vs {subject}"
            );
            assert!(
                (g.attractor_mass - attractor).abs() < 1e-5,
                "{g:?} vs {attractor}"
            );
        }
    }

    /// The baseline beside each score, set against a loop over the hand-written arcs.
    #[test]
    fn baseline_matches_a_loop_over_the_arcs() {
        let (model, _, probe, device) = setup();
        let scores = syntax_scores(&model, &probe, &device);
        for s in &scores.relations {
            let mut best = (1, 0usize);
            let mut n = 0;
            for (relation, ..) in arcs() {
                n += usize::from(relation == s.relation);
            }
            for k in 1..=BASELINE_MAX_OFFSET {
                let mut hits = 0;
                for (relation, from, to, _) in arcs() {
                    if relation == s.relation && from >= k && from - k == to {
                        hits += 1;
                    }
                }
                if hits > best.1 {
                    best = (k, hits);
                }
            }
            let expected = if n == 0 {
                0.0
            } else {
                best.1 as f64 / n as f64
            };
            assert_eq!(
                (s.baseline.offset, s.baseline.n),
                (best.0, n),
                "{}",
                s.relation
            );
            assert_eq!(s.baseline.accuracy, expected, "{}", s.relation);
        }
        // Written out: subject arcs are 4, 2 and 5 words back, so no offset gets two.
        let subject = &scores
            .relations
            .iter()
            .find(|r| r.relation == Relation::Subject)
            .unwrap()
            .baseline;
        assert_eq!((subject.offset, subject.n), (2, 3));
    }

    /// `log p` of each form, set against the logits computed by hand for "runs" in the first
    /// sentence: after "...cats run", `log p("s") + log p(".")` (the latter after "...runs")
    /// against `log p(".")`; with head 1.0 zeroed as well.
    /// Zeroing a head's rows of W_O gives the logits of the head mask (which scales the
    /// head's output inside attention), and differs from the intact model.
    #[test]
    fn without_heads_is_the_head_mask_in_the_weights() {
        let (model, tokenizer, _, device) = setup();
        let ids = tokenizer.encode(TEXT).unwrap();
        let t = ids.len();
        let logits = |m: &Gpt, mask: Option<Vec<f32>>| {
            let head_mask =
                mask.map(|m| Tensor::<2>::from_data(TensorData::new(m, [2, 2]), &device));
            to_host::<f32, 3>(
                m.forward_with(
                    ids_tensor(&ids, 1, t, &device),
                    ForwardOptions {
                        head_mask,
                        ..ForwardOptions::default()
                    },
                )
                .logits,
            )
        };
        let intact = logits(&model, None);
        for (ablate, mask) in [
            (vec![(0, 1)], vec![1.0, 0.0, 1.0, 1.0]),
            (vec![(1, 0), (0, 0)], vec![0.0, 1.0, 0.0, 1.0]),
        ] {
            let masked = logits(&model, Some(mask));
            let cut = logits(&without_heads(&model, &ablate).unwrap(), None);
            let worst = masked
                .iter()
                .zip(&cut)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(worst < 1e-5, "{ablate:?}: {worst}");
            let moved = intact
                .iter()
                .zip(&cut)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            assert!(moved > 1e-3, "{ablate:?}: {moved}");
        }
        assert!(matches!(
            without_heads(&model, &[(0, 2)]),
            Err(SyntaxScoreError::Head { head: 2, .. })
        ));
    }

    #[test]
    fn forced_choice_matches_logits_by_hand() {
        let (model, tokenizer, probe, device) = setup();
        // "runs" (singular subject, plural attractor) and "sleep" (plural, singular) qualify.
        let log_p = |text: &str, next: char, ablate: Option<HeadId>| {
            let ids = tokenizer.encode(text).unwrap();
            let mut mask = vec![1.0f32; 4];
            if let Some((l, h)) = ablate {
                mask[l * 2 + h] = 0.0;
            }
            let options = ForwardOptions {
                head_mask: Some(Tensor::from_data(TensorData::new(mask, [2, 2]), &device)),
                ..ForwardOptions::default()
            };
            let logits = model
                .forward_with(ids_tensor(&ids, 1, ids.len(), &device), options)
                .logits;
            let v = tokenizer.vocab_size();
            let row = to_host::<f32, 3>(logits)[(ids.len() - 1) * v..].to_vec();
            let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x)) as f64;
            let log_z = max
                + row
                    .iter()
                    .map(|&x| (x as f64 - max).exp())
                    .sum::<f64>()
                    .ln();
            let id = tokenizer.encode(&next.to_string()).unwrap()[0] as usize;
            row[id] as f64 - log_z
        };
        for ablate in [None, Some((1, 0))] {
            let heads: Vec<HeadId> = ablate.into_iter().collect();
            let fc = forced_choice(&model, &tokenizer, &probe, &heads, &device).unwrap();
            assert_eq!(fc.n, 2);
            let runs = fc.choices[0];
            assert_eq!(probe.syntax.agreements[runs.agreement].verb, 5);
            let right = log_p("the dog near the cats run", 's', ablate)
                + log_p("the dog near the cats runs", '.', ablate);
            let wrong = log_p("the dog near the cats run", '.', ablate);
            assert!(
                (runs.right - right).abs() < 1e-4,
                "{ablate:?}: {} vs {right}",
                runs.right
            );
            assert!(
                (runs.wrong - wrong).abs() < 1e-4,
                "{ablate:?}: {} vs {wrong}",
                runs.wrong
            );
            let sleep = fc.choices[1];
            assert_eq!(probe.syntax.agreements[sleep.agreement].verb, 12);
            let expected = [runs, sleep].iter().filter(|c| c.right > c.wrong).count() as f64 / 2.0;
            assert_eq!(fc.accuracy, expected);
        }
    }

    #[test]
    fn units_follow_the_tokens() {
        let (_, tokenizer, probe, _) = setup();
        // Char-level: every token is a character, a unit is the word's span and its boundary.
        for (u, (start, end)) in probe.units.iter().zip(SPANS) {
            assert_eq!(*u, start..end + 1);
        }
        assert_eq!(probe.decision_token(&probe.syntax.agreements[0]), 24);
        // Bytes are the same for ASCII.
        let bytes = SyntaxProbe::new(&Tokenizer::byte(), TEXT).unwrap();
        assert_eq!(bytes.units, probe.units);
        // A BPE whose tokens carry the space before a word: each unit decodes to its word,
        // with the boundary only where that is a token of its own.
        let corpus = headlab_data::corpus::grammar(3, 20_000);
        let bpe = Tokenizer::train_bpe(&corpus, 300).unwrap();
        let p = SyntaxProbe::new(&bpe, TEXT).unwrap();
        for (w, u) in p.syntax.words.iter().zip(&p.units) {
            let text = &TEXT[p.starts[u.start]..p.starts[u.end]];
            assert!(
                text.trim_start().starts_with(&w.form),
                "{text:?} for {}",
                w.form
            );
            assert!(
                !text[w.end - p.starts[u.start]..].contains(|c: char| c.is_alphabetic()),
                "{text:?}"
            );
        }
        assert!(tokenizer.vocab_size() < 30);
    }

    #[test]
    fn layer_sweep_zeroes_the_head_then_each_other_head_of_its_layer_alone() {
        let (model, tokenizer, probe, device) = setup();
        let rows = layer_sweep(&model, &tokenizer, &probe, (1, 1), (0, 1), &[], &device).unwrap();
        let sets: Vec<(AblationKind, Vec<HeadId>)> = rows
            .iter()
            .map(|r| (r.kind, r.result.ablated.clone()))
            .collect();
        use AblationKind::*;
        assert_eq!(sets, [(Syntactic, vec![(1, 1)]), (SameLayer, vec![(1, 0)])]);
        for row in &rows {
            // Field by field: an empty construction's accuracy is NaN, unequal to itself.
            let alone =
                forced_choice(&model, &tokenizer, &probe, &row.result.ablated, &device).unwrap();
            assert_eq!(row.result.choices, alone.choices);
            assert_eq!(
                (row.result.n, row.result.accuracy),
                (alone.n, alone.accuracy)
            );
        }
        // Rows already measured are taken as they are, with this sweep's kinds.
        let again = layer_sweep(&model, &tokenizer, &probe, (1, 1), (0, 1), &rows, &device);
        let kinds = |rs: &[AblationRow]| -> Vec<(AblationKind, Vec<Choice>)> {
            rs.iter()
                .map(|r| (r.kind, r.result.choices.clone()))
                .collect()
        };
        assert_eq!(kinds(&again.unwrap()), kinds(&rows));
        let msg = layer_sweep(&model, &tokenizer, &probe, (2, 0), (0, 1), &[], &device)
            .unwrap_err()
            .to_string();
        assert!(msg.contains("2.0"), "{msg}");
    }

    #[test]
    fn sweep_ablates_tracked_heads_alone_together_and_controls() {
        let (model, tokenizer, probe, device) = setup();
        let rows = ablation_sweep(
            &model,
            &tokenizer,
            &probe,
            &[(1, 0), (1, 1)],
            10,
            (0, 1),
            &device,
        )
        .unwrap();
        let sets: Vec<(AblationKind, Vec<HeadId>)> = rows
            .iter()
            .map(|r| (r.kind, r.result.ablated.clone()))
            .collect();
        use AblationKind::*;
        assert_eq!(
            sets,
            [
                (Intact, vec![]),
                (Tracked, vec![(1, 0)]),
                (Tracked, vec![(1, 1)]),
                (Tracked, vec![(1, 0), (1, 1)]),
                (Control, vec![(0, 0), (0, 1)]),
            ]
        );
        assert_eq!(combinations(4, 2, 10).len(), 6);
        assert_eq!(combinations(4, 2, 3), [vec![0, 1], vec![0, 2], vec![0, 3]]);
        assert!(rows.iter().all(|r| r.sampled.is_none()));
        // More sets than asked for: that many distinct ones, drawn from every head.
        let drawn = control_sets(8, 2, 6);
        assert_eq!(drawn.len(), 6);
        for (i, a) in drawn.iter().enumerate() {
            assert!(a.len() == 2 && a[0] < a[1] && a[1] < 8, "{drawn:?}");
            assert!(!drawn[..i].contains(a), "{drawn:?}");
        }
        assert_eq!(drawn, control_sets(8, 2, 6));
        assert_ne!(drawn, combinations(8, 2, 6), "a draw, not the first sets");
        assert_eq!(control_sets(4, 2, 6), combinations(4, 2, 6));

        // Four heads a layer: the controls of two layer-1 trackers are the layer's other two.
        let config = GptConfig {
            vocab_size: tokenizer.vocab_size(),
            block_size: 64,
            d_model: 16,
            n_layers: 2,
            n_heads: 4,
            ..GptConfig::default()
        };
        let wide = Gpt::new(&config, &device).unwrap();
        let rows = ablation_sweep(
            &wide,
            &tokenizer,
            &probe,
            &[(1, 1), (1, 2)],
            10,
            (0, 1),
            &device,
        )
        .unwrap();
        let controls: Vec<Vec<HeadId>> = rows
            .iter()
            .filter(|r| r.kind == Control)
            .map(|r| r.result.ablated.clone())
            .collect();
        assert_eq!(controls, [vec![(1, 0), (1, 3)]]);
        assert!(matches!(
            forced_choice(&model, &tokenizer, &probe, &[(2, 0)], &device),
            Err(SyntaxScoreError::Head { layer: 2, .. })
        ));
    }

    /// Trackers: a share above `min_share` (strictly) and a mean mass `margin` above the
    /// attractor's, ordered by subject mass, built by hand.
    #[test]
    fn trackers_prefer_the_subject_at_most_verbs_by_the_margin() {
        let head = |layer, head, subject_mass, attractor_mass, subject_share| AgreementScore {
            layer,
            head,
            n: 10,
            subject_mass,
            attractor_mass,
            subject_share,
        };
        let scores = SyntaxScores {
            relations: Vec::new(),
            agreement: vec![
                head(0, 0, 0.30, 0.10, 0.5),  // share not above 0.5
                head(0, 1, 0.20, 0.16, 0.9),  // margin 0.04 < 0.05
                head(1, 0, 0.22, 0.14, 0.53), // passes
                head(1, 1, 0.34, 0.16, 0.70), // passes, more subject mass
                AgreementScore {
                    n: 0,
                    ..head(1, 2, 0.9, 0.0, 1.0)
                }, // no verbs
            ],
            dropped: 0,
        };
        assert_eq!(subject_trackers(&scores, 0.5, 0.05), [(1, 1), (1, 0)]);
        assert_eq!(
            subject_trackers(&scores, 0.5, 0.0),
            [(1, 1), (1, 0), (0, 1)]
        );
    }

    #[test]
    fn roles_need_the_margin_over_the_baseline() {
        let (model, _, probe, device) = setup();
        let mut scores = syntax_scores(&model, &probe, &device);
        for r in &mut scores.relations {
            r.n = ROLE_MIN_ARCS;
            r.baseline.accuracy = 0.5;
            r.accuracy = if (r.layer, r.head, r.relation) == (1, 1, Relation::Subject) {
                0.5 + ROLE_MARGIN
            } else {
                0.5 + ROLE_MARGIN - 0.01
            };
        }
        let roles = syntax_roles(&scores);
        assert_eq!(roles.len(), 4);
        for r in &roles {
            let expected = if (r.layer, r.head) == (1, 1) {
                vec![Relation::Subject]
            } else {
                vec![]
            };
            assert_eq!(r.roles, expected, "{}.{}", r.layer, r.head);
        }
        scores
            .relations
            .iter_mut()
            .for_each(|r| r.n = ROLE_MIN_ARCS - 1);
        assert!(syntax_roles(&scores).iter().all(|r| r.roles.is_empty()));
    }
}
