//! Heads on the `relations` corpus ([`headlab_data::relations`]): for every head, how often it
//! attends most to the subject where the verb's number is decided and to the verb where the
//! object is predicted (Clark et al. 2019, against the best fixed-offset rule); and the two
//! forced choices, the verb's number and an object that fits the verb against one that does
//! not, with any heads zeroed.
//!
//! Word tokens only: each sentence is read as ". SENTENCE." (the leading "." is the end of
//! the sentence before, as in training), so word k of a sentence is token k + 1 and the
//! position that predicts word k is token k. A tokenizer that splits a word is refused.

use burn::tensor::{Device, Tensor, TensorData};
use headlab_data::relations::RelationSentence;
use headlab_data::syntax::{Arc, BASELINE_MAX_OFFSET, Relation, fixed_offset_baseline};
use headlab_data::{Tokenizer, TokenizerError, ids_tensor};
use headlab_kernels::to_host;
use headlab_model::{ForwardOptions, Gpt};
use serde::Serialize;

use crate::syntax::{HeadId, RelationScore};

/// The relations of the corpus, in the order files list them.
pub const RELATIONS: [Relation; 2] = [Relation::Subject, Relation::Object];

/// Sentences of one forward pass.
const BATCH_ROWS: usize = 64;

/// Why the relations cannot be measured.
#[derive(Debug, thiserror::Error)]
pub enum RelationsError {
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(
        "{what:?} is {tokens} tokens, not one: the relations are measured word by word, so \
         the run needs data.tokenizer = \"word\""
    )]
    NotOneToken { what: String, tokens: usize },
    #[error("{sentence:?} is {tokens} tokens, more than the model's block_size of {block_size}")]
    TooLong {
        sentence: String,
        tokens: usize,
        block_size: usize,
    },
    #[error("no head {layer}.{head}: the model has {n_layers} layers of {n_heads} heads")]
    Head {
        layer: usize,
        head: usize,
        n_layers: usize,
        n_heads: usize,
    },
}

/// Test sentences, tokenized, with the ids of each forced choice.
#[derive(Debug, Clone)]
pub struct RelationProbe {
    pub sentences: Vec<RelationSentence>,
    /// Per sentence: ". " and its words and "." as tokens.
    pub ids: Vec<Vec<u32>>,
    /// Per sentence: the ids of the verb's form that agrees and of the other.
    pub number: Vec<(u32, u32)>,
    /// Per sentence: the ids of its object noun and of another class's noun in its place
    /// ([`RelationSentence::object_choice`], the class after it).
    pub object: Vec<(u32, u32)>,
}

impl RelationProbe {
    /// Tokenizes `sentences` for a model of `block_size` with `tokenizer`, one token per word.
    pub fn new(
        tokenizer: &Tokenizer,
        sentences: Vec<RelationSentence>,
        block_size: usize,
    ) -> Result<Self, RelationsError> {
        let one = |word: &str| -> Result<u32, RelationsError> {
            let ids = tokenizer.encode(&format!(" {word}"))?;
            match ids[..] {
                [id] => Ok(id),
                _ => Err(RelationsError::NotOneToken {
                    what: format!(" {word}"),
                    tokens: ids.len(),
                }),
            }
        };
        let (mut ids, mut number, mut object) = (Vec::new(), Vec::new(), Vec::new());
        for s in &sentences {
            let tokens = tokenizer.encode(&format!(". {}", s.text))?;
            if tokens.len() != s.words().len() + 2 {
                return Err(RelationsError::NotOneToken {
                    what: s.text.clone(),
                    tokens: tokens.len(),
                });
            }
            if tokens.len() > block_size {
                return Err(RelationsError::TooLong {
                    sentence: s.text.clone(),
                    tokens: tokens.len(),
                    block_size,
                });
            }
            ids.push(tokens);
            let forms = s.verb_forms();
            number.push((
                one(forms.form(s.subject_plural))?,
                one(forms.form(!s.subject_plural))?,
            ));
            let (fits, other) = s.object_choice(1);
            object.push((one(fits)?, one(other)?));
        }
        Ok(Self {
            sentences,
            ids,
            number,
            object,
        })
    }
}

/// One forward pass's host copies: logits `[b, t, vocab]` and, when asked, one
/// `[b, h, t, t]` per layer.
struct Pass {
    rows: Vec<usize>,
    t: usize,
    logits: Vec<f32>,
    weights: Vec<Vec<f32>>,
}

/// Runs the probe's sentences through `model` in batches, each right-padded with its first
/// token to the batch's longest (a causal model's earlier positions never see the padding).
fn passes(
    model: &Gpt,
    probe: &RelationProbe,
    mask: Option<Tensor<2>>,
    weights: bool,
    device: &Device,
) -> Vec<Pass> {
    let order: Vec<usize> = (0..probe.ids.len()).collect();
    order
        .chunks(BATCH_ROWS)
        .map(|rows| {
            let t = rows.iter().map(|&r| probe.ids[r].len()).max().unwrap_or(1);
            let mut tokens = Vec::with_capacity(rows.len() * t);
            for &r in rows {
                let ids = &probe.ids[r];
                tokens.extend_from_slice(ids);
                tokens.extend(std::iter::repeat_n(ids[0], t - ids.len()));
            }
            let out = model.forward_with(
                ids_tensor(&tokens, rows.len(), t, device),
                ForwardOptions {
                    head_mask: mask.clone(),
                    return_weights: weights,
                    ..ForwardOptions::default()
                },
            );
            Pass {
                rows: rows.to_vec(),
                t,
                logits: to_host::<f32, 3>(out.logits),
                weights: out.weights.into_iter().map(to_host::<f32, 4>).collect(),
            }
        })
        .collect()
}

/// Every head's score on each of [`RELATIONS`] (layer-major, then relation): the share of
/// arcs whose predicting word attends most to the related word (among every token up to
/// it, the leading "." included), against the best "k words back" rule on the same arcs.
pub fn relation_scores(model: &Gpt, probe: &RelationProbe, device: &Device) -> Vec<RelationScore> {
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    // Per head and relation: arcs, hits, mass.
    let mut sums = vec![[(0usize, 0usize, 0.0f64); 2]; n_layers * n_heads];
    for pass in passes(model, probe, None, true, device) {
        let t = pass.t;
        for (row, &s) in pass.rows.iter().enumerate() {
            for arc in probe.sentences[s].arcs() {
                let k = RELATIONS
                    .iter()
                    .position(|&r| r == arc.relation)
                    .expect("the corpus's arcs are its relations");
                let (q, target) = (arc.from + 1, arc.to + 1);
                for (layer, w) in pass.weights.iter().enumerate() {
                    for head in 0..n_heads {
                        let at = |j: usize| f64::from(w[((row * n_heads + head) * t + q) * t + j]);
                        // The most-attended token: the first of the largest.
                        let best = (0..=q).fold(0, |b, j| if at(j) > at(b) { j } else { b });
                        let e = &mut sums[layer * n_heads + head][k];
                        e.0 += 1;
                        e.1 += usize::from(best == target);
                        e.2 += at(target);
                    }
                }
            }
        }
    }
    let word_arcs: Vec<Arc> = probe.sentences.iter().flat_map(|s| s.arcs()).collect();
    let baselines = RELATIONS.map(|r| fixed_offset_baseline(r, &word_arcs, BASELINE_MAX_OFFSET));
    let share = |x: f64, n: usize| if n == 0 { 0.0 } else { x / n as f64 };
    let mut out = Vec::with_capacity(sums.len() * 2);
    for (i, per) in sums.iter().enumerate() {
        for (k, &(n, hits, mass)) in per.iter().enumerate() {
            out.push(RelationScore {
                layer: i / n_heads,
                head: i % n_heads,
                relation: RELATIONS[k],
                n,
                accuracy: share(hits as f64, n),
                mass: share(mass, n),
                baseline: baselines[k],
            });
        }
    }
    out
}

/// One forced choice over a set of sentences.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ChoiceScore {
    /// Sentences asked.
    pub n: usize,
    /// Share where the model puts more probability on the right word; NaN with none asked.
    pub accuracy: f64,
    /// Mean logit of the right word minus the wrong one's (its log odds); NaN with none.
    pub margin: f64,
}

/// Both forced choices.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Choices {
    /// The verb's number, at the word before it, on the sentences whose attractor differs in
    /// number from the subject (the ones where number needs the subject relation).
    pub number: ChoiceScore,
    /// The object noun against another class's, at the word before it, on every sentence.
    pub object: ChoiceScore,
}

impl Choices {
    /// The choice that tests `relation` (`subject`: the verb's number; `object`: the object).
    pub fn of(&self, relation: Relation) -> ChoiceScore {
        match relation {
            Relation::Subject => self.number,
            _ => self.object,
        }
    }
}

/// Both forced choices with the heads `ablate` zeroed (a head mask of 0: their outputs do not
/// reach the residual stream).
pub fn forced_choices(
    model: &Gpt,
    probe: &RelationProbe,
    ablate: &[HeadId],
    device: &Device,
) -> Result<Choices, RelationsError> {
    let (n_layers, n_heads) = (model.config.n_layers, model.config.n_heads);
    if let Some(&(layer, head)) = ablate.iter().find(|&&(l, h)| l >= n_layers || h >= n_heads) {
        return Err(RelationsError::Head {
            layer,
            head,
            n_layers,
            n_heads,
        });
    }
    let mut m = vec![1.0f32; n_layers * n_heads];
    for &(l, h) in ablate {
        m[l * n_heads + h] = 0.0;
    }
    let mask = Tensor::from_data(TensorData::new(m, [n_layers, n_heads]), device);
    // Asked, right, summed margin.
    let (mut number, mut object) = ((0usize, 0usize, 0.0f64), (0usize, 0usize, 0.0f64));
    for pass in passes(model, probe, Some(mask), false, device) {
        let vocab = pass.logits.len() / (pass.rows.len() * pass.t);
        for (row, &s) in pass.rows.iter().enumerate() {
            let sentence = &probe.sentences[s];
            let logit = |p: usize, id: u32| pass.logits[(row * pass.t + p) * vocab + id as usize];
            // Word k is predicted at token k.
            let ask = |tally: &mut (usize, usize, f64), at: usize, (right, wrong): (u32, u32)| {
                let d = f64::from(logit(at, right)) - f64::from(logit(at, wrong));
                tally.0 += 1;
                tally.1 += usize::from(d > 0.0);
                tally.2 += d;
            };
            if sentence.attractor_mismatch() {
                ask(&mut number, sentence.verb, probe.number[s]);
            }
            ask(&mut object, sentence.object, probe.object[s]);
        }
    }
    let score = |(n, right, margin): (usize, usize, f64)| {
        let mean = |x: f64| if n == 0 { f64::NAN } else { x / n as f64 };
        ChoiceScore {
            n,
            accuracy: mean(right as f64),
            margin: mean(margin),
        }
    };
    Ok(Choices {
        number: score(number),
        object: score(object),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use headlab_data::relations::{parse_relations, relations};
    use headlab_model::GptConfig;

    /// Three sentences parsed by hand (word indices counted from 0):
    /// 0 the 1 dog 2 near 3 the 4 cats 5 chases 6 one 7 of 8 the 9 red 10 mice
    /// 0 some 1 men 2 that 3 a 4 spy 5 likes 6 read 7 the 8 letter
    /// 0 a 1 child 2 eats 3 the 4 green 5 new 6 pear
    const SENTENCES: [&str; 3] = [
        "the dog near the cats chases one of the red mice.",
        "some men that a spy likes read the letter.",
        "a child eats the green new pear.",
    ];

    /// `(relation, sentence, from word, to word)` by hand.
    const ARCS: [(Relation, usize, usize, usize); 5] = [
        (Relation::Subject, 0, 4, 1),
        (Relation::Object, 0, 9, 5),
        (Relation::Subject, 1, 5, 1),
        (Relation::Object, 1, 7, 6),
        (Relation::Object, 2, 5, 2),
    ];

    fn setup() -> (Gpt, Tokenizer, RelationProbe, Device) {
        let device = Device::flex();
        device.seed(5);
        let text = relations(1, 20_000);
        let tokenizer = Tokenizer::train_words(&text).unwrap();
        let config = GptConfig {
            vocab_size: tokenizer.vocab_size(),
            block_size: 32,
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            ..GptConfig::default()
        };
        let model = Gpt::new(&config, &device).unwrap();
        let sentences = SENTENCES
            .iter()
            .map(|s| parse_relations(s).unwrap().sentence)
            .collect();
        let probe = RelationProbe::new(&tokenizer, sentences, 32).unwrap();
        (model, tokenizer, probe, device)
    }

    /// One sentence alone, unpadded: `(logits [t][vocab], weights [layer][head][q][j])`.
    #[allow(clippy::type_complexity)]
    fn alone(
        model: &Gpt,
        tokenizer: &Tokenizer,
        sentence: &str,
        mask: Option<Tensor<2>>,
        device: &Device,
    ) -> (Vec<Vec<f32>>, Vec<Vec<Vec<Vec<f32>>>>) {
        let ids = tokenizer.encode(&format!(". {sentence}")).unwrap();
        let t = ids.len();
        let out = model.forward_with(
            ids_tensor(&ids, 1, t, device),
            ForwardOptions {
                head_mask: mask,
                return_weights: true,
                ..ForwardOptions::default()
            },
        );
        let logits = to_host::<f32, 3>(out.logits);
        let vocab = logits.len() / t;
        let logits = (0..t)
            .map(|p| logits[p * vocab..(p + 1) * vocab].to_vec())
            .collect();
        let h = model.config.n_heads;
        let weights = out
            .weights
            .into_iter()
            .map(|w| {
                let w = to_host::<f32, 4>(w);
                (0..h)
                    .map(|hd| {
                        (0..t)
                            .map(|q| (0..t).map(|j| w[(hd * t + q) * t + j]).collect())
                            .collect()
                    })
                    .collect()
            })
            .collect();
        (logits, weights)
    }

    /// Clark scores against a loop over the hand-parsed arcs, each sentence run alone: the
    /// most-attended token by a plain scan, and the rule's offsets counted by hand.
    #[test]
    fn scores_match_a_loop_over_hand_parsed_arcs() {
        let (model, tokenizer, probe, device) = setup();
        let got = relation_scores(&model, &probe, &device);
        let runs: Vec<_> = SENTENCES
            .iter()
            .map(|s| alone(&model, &tokenizer, s, None, &device))
            .collect();
        for layer in 0..2 {
            for head in 0..2 {
                for (k, relation) in RELATIONS.iter().enumerate() {
                    let (mut n, mut hits, mut mass) = (0, 0, 0.0);
                    for &(_, s, from, to) in ARCS.iter().filter(|a| a.0 == *relation) {
                        let row = &runs[s].1[layer][head][from + 1];
                        let mut best = 0;
                        for j in 0..=from + 1 {
                            if row[j] > row[best] {
                                best = j;
                            }
                        }
                        n += 1;
                        hits += usize::from(best == to + 1);
                        mass += f64::from(row[to + 1]);
                    }
                    let score = &got[(layer * 2 + head) * 2 + k];
                    assert_eq!(
                        (score.layer, score.head, score.relation),
                        (layer, head, *relation)
                    );
                    assert_eq!(score.n, n);
                    assert!((score.accuracy - hits as f64 / n as f64).abs() < 1e-12);
                    assert!((score.mass - mass / n as f64).abs() < 1e-5, "{score:?}");
                }
            }
        }
        // Subject arcs are 3 and 4 words back, so the nearest best rule is 3 back (1 of 2);
        // object arcs are 4, 1 and 3 back: each offset gets one, the nearest is 1.
        let subject = got[0].baseline;
        assert_eq!((subject.offset, subject.n, subject.accuracy), (3, 2, 0.5));
        let object = got[1].baseline;
        assert_eq!((object.offset, object.n), (1, 3));
        assert!((object.accuracy - 1.0 / 3.0).abs() < 1e-12);
    }

    /// Forced choices against the logits of each sentence run alone, with and without a head
    /// zeroed: the number only where the attractor differs (sentence 0: "dog" against "cats";
    /// sentence 1: "men" against "spy"), the object everywhere.
    #[test]
    fn forced_choices_match_the_logits_read_by_hand() {
        let (model, tokenizer, probe, device) = setup();
        let id = |w: &str| tokenizer.encode(&format!(" {w}")).unwrap()[0] as usize;
        // (sentence, verb word, agreeing form, other form, object word, object, other class's)
        let cases = [
            (0, 5, "chases", "chase", 10, "mice", "books"),
            (1, 6, "read", "reads", 8, "letter", "cake"),
            (2, 2, "eats", "eat", 6, "pear", "violin"),
        ];
        let intact = forced_choices(&model, &probe, &[], &device).unwrap();
        for ablate in [vec![], vec![(1, 0)], vec![(0, 1), (1, 1)]] {
            let got = forced_choices(&model, &probe, &ablate, &device).unwrap();
            let mut m = vec![1.0f32; 4];
            for &(l, h) in &ablate {
                m[l * 2 + h] = 0.0;
            }
            let mask = Tensor::from_data(TensorData::new(m, [2, 2]), &device);
            // (right, summed logit margin) of each choice.
            let (mut number, mut object) = ((0, 0.0), (0, 0.0));
            for (s, verb, right, wrong, obj, fits, other) in cases {
                let (logits, _) = alone(
                    &model,
                    &tokenizer,
                    SENTENCES[s],
                    Some(mask.clone()),
                    &device,
                );
                let d = |p: usize, a: &str, b: &str| f64::from(logits[p][id(a)] - logits[p][id(b)]);
                if s < 2 {
                    number.0 += usize::from(d(verb, right, wrong) > 0.0);
                    number.1 += d(verb, right, wrong);
                }
                object.0 += usize::from(d(obj, fits, other) > 0.0);
                object.1 += d(obj, fits, other);
            }
            assert_eq!(got.number.n, 2);
            assert_eq!(got.object.n, 3);
            assert_eq!(got.number.accuracy, number.0 as f64 / 2.0, "{ablate:?}");
            assert_eq!(got.object.accuracy, object.0 as f64 / 3.0, "{ablate:?}");
            assert!(
                (got.number.margin - number.1 / 2.0).abs() < 1e-4,
                "{ablate:?}"
            );
            assert!(
                (got.object.margin - object.1 / 3.0).abs() < 1e-4,
                "{ablate:?}"
            );
            // Zeroing a head moves the margins: the mask reaches the logits.
            if !ablate.is_empty() {
                assert_ne!(got.object.margin, intact.object.margin);
            }
        }
        assert!(matches!(
            forced_choices(&model, &probe, &[(2, 0)], &device),
            Err(RelationsError::Head { layer: 2, .. })
        ));
    }

    /// A char tokenizer splits words: refused with the setting that fixes it.
    #[test]
    fn a_tokenizer_that_splits_words_is_refused() {
        let text = relations(1, 5_000);
        let tokenizer = Tokenizer::char_from_corpus(&text).unwrap();
        let sentences = vec![parse_relations(SENTENCES[2]).unwrap().sentence];
        let err = RelationProbe::new(&tokenizer, sentences, 64).unwrap_err();
        assert!(
            err.to_string().contains("data.tokenizer = \"word\""),
            "{err}"
        );
    }
}
