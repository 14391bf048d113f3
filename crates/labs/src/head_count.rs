//! `lab heads`: one head vs many at equal parameters. d_model stays fixed while it is split
//! into 1..64 heads of d_k = d_model / h, over several seeds, on the two-lookup `lookup`
//! corpus; the lab reports which counts are level and which head fetches which source.

use headlab_kernels::to_host;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};
use headlab_data::corpus::{LOOKUP_ALPHABET, LOOKUP_FAR, LOOKUP_NEAR, lookup_rule};
use headlab_data::{Dataset, Split, Tokenizer};
use headlab_heads::Probe;
use headlab_heads::analysis::pattern_scores;
use headlab_heads::scores::label;
use headlab_model::{ForwardOptions, Gpt};
use headlab_report::{ReportError, report_run};
use headlab_train::config::RunConfig;

use crate::{LabError, Runs, check_head_counts, lab_config, open, train_run, write, write_summary};

/// The shipped config: 1 layer, d_model 64, 1500 steps on the lookup corpus.
pub const CONFIG: &str = include_str!("../../../configs/lab-heads.toml");

/// The seeds when none are given.
pub const SEEDS: [u64; 3] = [1, 2, 3];

/// The head counts when none are given.
pub const HEAD_COUNTS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

/// Runs the lab into `out` with `sets` applied to its config: one run per head count and
/// seed (`out/h<H>-s<SEED>`, each with its page), `val_loss.csv`, `heads.png` and
/// `summary.md` (returned), which ends with `reproduce`.
pub fn run(
    out: &Path,
    sets: &[String],
    seeds: Vec<u64>,
    head_counts: &[usize],
    reproduce: &str,
    runs: Runs<'_>,
) -> Result<String, LabError> {
    let base = lab_config(CONFIG, "configs/lab-heads.toml", sets)?;
    let lab = heads(base, seeds, head_counts, out, runs)?;
    for c in &lab.counts {
        for seed in &lab.seeds {
            report_run(&out.join(format!("h{}-s{seed}", c.n_heads)))?;
        }
    }
    write(&out.join("val_loss.csv"), &heads_csv(&lab))?;
    heads_png(&lab, &out.join("heads.png"))?;
    write_summary(out, summary(&lab, reproduce))
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
    (tokens.to_vec(0..n * block), n)
}

/// Measures a model trained on the `lookup` corpus (`None` when its vocabulary is not the
/// corpus's letters): every position from `LOOKUP_FAR - 1` on predicts a letter whose two
/// sources lie in the window.
// Over 80 lines on purpose: one measurement on one batch: the ablated passes reuse its forward's inputs and queries.
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
        let logits = to_host::<f32, _>(logits);
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
        let a = to_host::<f32, _>(weights);
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
// Over 80 lines on purpose: the runs loop with its progress line; the measurements are `lookup_probe` and `pattern_scores`.
pub fn heads(
    base: RunConfig,
    seeds: Vec<u64>,
    head_counts: &[usize],
    dir: &Path,
    runs: Runs<'_>,
) -> Result<HeadsLab, LabError> {
    let d_model = base.model.d_model;
    let started = Instant::now();
    let (mut counts, mut trained_now) = (Vec::new(), 0);
    for &h in head_counts {
        check_head_counts(d_model, &[h])?;
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
            // Runs with more heads take longer, so this is a lower bound; runs kept by
            // --resume took no time here and do not count.
            let eta = if trained_now == 0 {
                String::new()
            } else {
                format!(
                    ", at least {:.0} s left",
                    elapsed / trained_now as f64 * (total - done) as f64
                )
            };
            headlab_train::log_line!(
                "lab heads: run {}/{total}: {h} heads, seed {seed} ({elapsed:.0} s so far{eta})",
                done + 1
            );
            let mut config = base.clone();
            config.model.n_heads = h;
            config.train.seed = seed;
            let run_dir = dir.join(format!("h{h}-s{seed}"));
            let run = train_run(config, run_dir.clone(), runs)?;
            trained_now += usize::from(!run.reused);
            count.val_losses.push(run.val_loss);
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

/// `lab heads`'s summary: one row per head count, val loss over the seeds.
// Over 80 lines on purpose: the summary page top to bottom; its one long paragraph is `mechanism`.
pub fn summary(lab: &HeadsLab, reproduce: &str) -> String {
    let m = &lab.base.model;
    let corpus = lab.base.data.builtin.as_deref().unwrap_or("a file");
    let lookup = lab
        .counts
        .iter()
        .all(|c| c.lookups.len() == c.val_losses.len());
    let mut s = String::from("# lab heads\n\n");
    let _ = writeln!(
        s,
        "Same d_model ({}), layers ({}) and parameter count, different numbers of heads, {} \
         steps each on the {corpus} corpus, seeds {:?}. Final val loss and, on the lookup \
         corpus, task accuracy (share of letters whose two sources are in view where the most \
         likely letter is the rule's), as mean and range across seeds, and the head labels of \
         every run.\n",
        m.d_model, m.n_layers, lab.base.train.max_iters, lab.seeds
    );
    if lookup {
        s += "The task: each letter is set by the letters 2 and 6 back (one of 16, 10% drawn at \
              random instead). Neither source is the current token, and either alone leaves the \
              letter open (about 1.4 nats left against 0.56 with both, measured on the corpus by \
              `the_next_letter_needs_both_sources_and_either_alone_leaves_it_open`): a prediction \
              needs two lookups at once.\n\n";
    }
    let range = |v: &[f64]| {
        let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
        let (min, max) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
        (mean, min, max)
    };
    // The best head count by mean val loss; another is worse only when its range lies wholly
    // above the best's.
    let best = lab
        .counts
        .iter()
        .min_by(|a, b| range(&a.val_losses).0.total_cmp(&range(&b.val_losses).0));
    let best_range = best.map(|b| range(&b.val_losses));
    let spread = lab.seeds.len() > 1;
    s += "| heads | d_k | parameters | val loss mean (min-max) | accuracy mean (min-max) | against the best | head labels (all seeds) |\n";
    s += "|---|---|---|---|---|---|---|\n";
    let mut verdicts = Vec::new();
    for c in &lab.counts {
        let (mean, min, max) = range(&c.val_losses);
        let accuracy = if c.lookups.is_empty() {
            "-".to_string()
        } else {
            let acc: Vec<f64> = c.lookups.iter().map(|l| l.accuracy).collect();
            let (a, lo, hi) = range(&acc);
            format!("{a:.3} ({lo:.3}-{hi:.3})")
        };
        let verdict = match (best, best_range) {
            (Some(b), _) if b.n_heads == c.n_heads => "best".to_string(),
            // One value per count has no range: the gap is all there is to report.
            (_, Some((best_mean, _, _))) if !spread => {
                format!("{:+.4} (one seed: no range)", mean - best_mean)
            }
            (_, Some((_, _, best_max))) if min > best_max => "worse (ranges apart)".to_string(),
            _ => "level (ranges overlap)".to_string(),
        };
        verdicts.push((c.n_heads, c.d_k, verdict.clone()));
        let labels: Vec<String> = c.labels.iter().map(|(k, v)| format!("{k} {v}")).collect();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {mean:.4} ({min:.4}-{max:.4}) | {accuracy} | {verdict} | {} |",
            c.n_heads,
            c.d_k,
            c.params,
            labels.join(", ")
        );
    }
    if lab.counts.len() > 1 {
        s += "\n![val loss against the number of heads](heads.png)\n";
    }
    // What the table says, in words that go no further than it.
    let worse: Vec<String> = verdicts
        .iter()
        .filter(|v| v.2.starts_with("worse"))
        .map(|v| format!("{} (d_k {})", v.0, v.1))
        .collect();
    if let Some(b) = best {
        let _ = write!(
            s,
            "\nLowest mean val loss: {} heads (d_k {}). ",
            b.n_heads, b.d_k
        );
        if !spread {
            s += "With one seed there is no spread across seeds to tell a gap from chance: give \
                  `--seeds 1,2,3` to rank the head counts.\n";
        } else if worse.is_empty() {
            s += "No other head count is worse by more than the spread across seeds.\n";
        } else {
            let _ = writeln!(
                s,
                "Worse with no overlap of seed ranges: {}; every other head count is level with \
                 it.",
                worse.join(", ")
            );
        }
    }
    if lookup {
        s += &mechanism(lab);
        s += &lookup_reading(lab);
    }
    s += &format!(
        "\nReproduce: `{reproduce}` (per-run directories `h<heads>-s<seed>/` hold curves, \
         checkpoints and each run's page, `report.html`; `val_loss.csv` every run's val loss, accuracy \
         and head labels).\n"
    );
    s
}

/// Which heads fetch which source in the best multi-head run and in a one-head run, with the
/// accuracy left when each head is ablated.
// Over 80 lines on purpose: one paragraph of the summary, built from one set of per-run measurements.
fn mechanism(lab: &HeadsLab) -> String {
    let mut s = String::new();
    let runs = lab.counts.iter().flat_map(|c| {
        c.lookups
            .iter()
            .zip(&c.val_losses)
            .zip(&lab.seeds)
            .map(move |((l, loss), seed)| (c.n_heads, *seed, l, *loss))
    });
    let name = |h: usize, k: usize| format!("{}.{}", k / h, k % h);
    let top = |v: &[f64]| {
        (0..v.len())
            .max_by(|&a, &b| v[a].total_cmp(&v[b]))
            .unwrap_or(0)
    };
    // The fewest heads above one: every head in view.
    if let Some(fewest) = lab
        .counts
        .iter()
        .map(|c| c.n_heads)
        .filter(|&h| h > 1)
        .min()
    {
        let _ = writeln!(
            s,
            "\n## Who fetches what: {fewest} heads\n\nAttention from each predicting position to \
             the near source (1 back) and the far source (5 back), and the accuracy with that \
             head's output zeroed (chance: 1/16 = 0.0625).\n"
        );
        s += "With a head zeroed, \"fits near\" is the share of predictions whose most likely \
              letter is one the near source allows (whatever the far letter), \"fits far\" the \
              same for the far source: 1 while that lookup survives, about 1/4 once it is lost.\n\n";
        s += "| seed | layer.head | to near source | to far source | accuracy | accuracy ablated | fits near, ablated | fits far, ablated |\n|---|---|---|---|---|---|---|---|\n";
        let mut lines = Vec::new();
        for (h, seed, l, _) in runs.clone().filter(|r| r.0 == fewest) {
            for k in 0..l.to_near.len() {
                let _ = writeln!(
                    s,
                    "| {seed} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
                    name(h, k),
                    l.to_near[k],
                    l.to_far[k],
                    l.accuracy,
                    l.ablated[k],
                    l.ablated_fits_near[k],
                    l.ablated_fits_far[k]
                );
            }
            let (near, far) = (top(&l.to_near), top(&l.to_far));
            lines.push(if near == far {
                format!(
                    "seed {seed}: head {} gives both sources the most attention (the lookups \
                     are not split)",
                    name(h, near)
                )
            } else {
                format!(
                    "seed {seed}: head {} takes the near source, head {} the far one; zeroing \
                     {} leaves accuracy {:.3} with {:.3} of predictions fitting the near source \
                     and {:.3} the far one; zeroing {} leaves {:.3}, fitting {:.3} and {:.3}",
                    name(h, near),
                    name(h, far),
                    name(h, near),
                    l.ablated[near],
                    l.ablated_fits_near[near],
                    l.ablated_fits_far[near],
                    name(h, far),
                    l.ablated[far],
                    l.ablated_fits_near[far],
                    l.ablated_fits_far[far]
                )
            });
        }
        let _ = writeln!(s, "\n{}.", lines.join("; "));
    }
    // The run with the lowest val loss among several heads: its busiest heads.
    let best = runs
        .clone()
        .filter(|r| r.0 > 1)
        .min_by(|a, b| a.3.total_cmp(&b.3));
    if let Some((h, seed, l, loss)) = best {
        let _ = writeln!(
            s,
            "\n## The lowest val loss: {h} heads, seed {seed} (val loss {loss:.4}, accuracy {:.3} \
             over {} predictions)\n\nThe heads that give each source the most attention, and \
             every head whose ablation costs more than 0.02 of accuracy:\n",
            l.accuracy, l.predictions
        );
        s += "| layer.head | to near source | to far source | accuracy ablated |\n|---|---|---|---|\n";
        let (near, far) = (top(&l.to_near), top(&l.to_far));
        let mut shown: Vec<usize> = vec![near, far];
        shown.extend((0..l.to_near.len()).filter(|&k| l.accuracy - l.ablated[k] > 0.02));
        shown.sort_unstable();
        shown.dedup();
        for k in shown {
            let _ = writeln!(
                s,
                "| {} | {:.3} | {:.3} | {:.3} |",
                name(h, k),
                l.to_near[k],
                l.to_far[k],
                l.ablated[k]
            );
        }
    }
    let single: Vec<_> = runs.filter(|r| r.0 == 1).collect();
    if !single.is_empty() {
        s += "\n## One head\n\n| seed | to near source | to far source | accuracy |\n|---|---|---|---|\n";
        for (_, seed, l, _) in &single {
            let _ = writeln!(
                s,
                "| {seed} | {:.3} | {:.3} | {:.3} |",
                l.to_near.first().unwrap_or(&f64::NAN),
                l.to_far.first().unwrap_or(&f64::NAN),
                l.accuracy
            );
        }
        s += "\nA single head has one softmax per position: whatever it gives the near source it \
              takes from the far one, and what it passes on is the weighted average of the two \
              letters' values.\n";
    }
    s
}

/// What the lookup table shows and does not, in sentences built from its own numbers.
fn lookup_reading(lab: &HeadsLab) -> String {
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let accuracy = |c: &HeadCount| mean(&c.lookups.iter().map(|l| l.accuracy).collect::<Vec<_>>());
    let Some(best) = lab
        .counts
        .iter()
        .min_by(|a, b| mean(&a.val_losses).total_cmp(&mean(&b.val_losses)))
    else {
        return String::new();
    };
    let best_max = best.val_losses.iter().copied().fold(f64::MIN, f64::max);
    // Ranges are compared only when there are ranges: one seed gives single values.
    let spread = lab.seeds.len() > 1;
    let apart = |c: &HeadCount| c.val_losses.iter().copied().fold(f64::MAX, f64::min) > best_max;
    let mut s = String::from("\n## What this shows, and what it does not\n\n");
    if let Some(one) = lab.counts.iter().find(|c| c.n_heads == 1) {
        let near = mean(&one.lookups.iter().map(|l| l.to_near[0]).collect::<Vec<_>>());
        let far = mean(&one.lookups.iter().map(|l| l.to_far[0]).collect::<Vec<_>>());
        let (acc, acc_best) = (accuracy(one), accuracy(best));
        let _ = write!(
            s,
            "One head picks the rule's letter with accuracy {acc:.3} (the best head count: \
             {acc_best:.3}). It gives the near source {near:.2} of its attention and the far \
             one {far:.2}; "
        );
        if (acc_best - acc).abs() < 0.01 {
            s += "attending to both places at once is enough here: on this task one head is not \
                  unable to make two lookups. ";
        } else {
            s += "the two letters arrive mixed, and it loses letters that several heads keep. ";
        }
        if !spread {
            let _ = write!(
                s,
                "Its val loss is {:.4} against {:.4} with {} heads, from one seed each. ",
                mean(&one.val_losses),
                mean(&best.val_losses),
                best.n_heads
            );
        } else if apart(one) && one.n_heads != best.n_heads {
            let _ = write!(
                s,
                "It does fall short in val loss, {:.4} against {:.4} with {} heads, with no \
                 overlap across seeds: in how much probability it puts on that letter, not in \
                 which letter it picks. ",
                mean(&one.val_losses),
                mean(&best.val_losses),
                best.n_heads
            );
        } else {
            s += "Its val loss is within the seeds' spread of the best. ";
        }
    }
    let many: Vec<String> = lab
        .counts
        .iter()
        .filter(|c| spread && c.d_k <= 2 && apart(c) && c.n_heads != best.n_heads)
        .map(|c| format!("{} heads (d_k {})", c.n_heads, c.d_k))
        .collect();
    if !many.is_empty() {
        let _ = write!(
            s,
            "With the smallest heads, {}, val loss is worse again (ranges apart). ",
            many.join(", ")
        );
    }
    let level: Vec<String> = lab
        .counts
        .iter()
        .filter(|c| spread && !apart(c) && c.n_heads != best.n_heads)
        .map(|c| c.n_heads.to_string())
        .collect();
    if !level.is_empty() {
        let _ = write!(
            s,
            "{} heads are level with the best {}: there the seeds decide more than the head \
             count. ",
            level.join(", "),
            best.n_heads
        );
    }
    let _ = writeln!(
        s,
        "\n\nAccuracy is close to 1 for every head count here, so it does not rank them; the \
         ranking rests on val loss, and the differences are hundredths of a nat. This is one \
         task, one layer, one width and one training length with {}: it does not show where \
         the plateau's edges move with depth, d_model or longer training, nor that heads split \
         other tasks this way.",
        seeds_in_words(lab.seeds.len())
    );
    s
}

/// "one seed", "three seeds", "12 seeds": how many seeds the summary's claims rest on.
fn seeds_in_words(n: usize) -> String {
    const WORDS: [&str; 10] = [
        "no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
    ];
    let count = WORDS
        .get(n)
        .map_or_else(|| n.to_string(), |w| w.to_string());
    format!("{count} seed{}", if n == 1 { "" } else { "s" })
}

/// `lab heads`'s `val_loss.csv`: one row per run, with its val loss, accuracy (empty off the
/// lookup corpus) and head labels.
pub fn heads_csv(lab: &HeadsLab) -> String {
    let mut csv = String::from("n_heads,d_k,seed,val_loss,accuracy,head_labels\n");
    for c in &lab.counts {
        for (i, (seed, loss)) in lab.seeds.iter().zip(&c.val_losses).enumerate() {
            let acc = c
                .lookups
                .get(i)
                .map_or(String::new(), |l| format!("{:.5}", l.accuracy));
            // "diffuse 3; previous-token 1": no commas inside the field.
            let labels = c.run_labels.get(i).map_or(String::new(), |m| {
                m.iter()
                    .map(|(k, v)| format!("{k} {v}"))
                    .collect::<Vec<_>>()
                    .join("; ")
            });
            let _ = writeln!(
                csv,
                "{},{},{seed},{loss:.5},{acc},{labels}",
                c.n_heads, c.d_k
            );
        }
    }
    csv
}

/// `lab heads`'s picture: val loss against log2(heads), one faint line per seed and the mean
/// (accuracy, in the table, is left out: near 1 it would flatten the loss curve).
pub fn heads_png(lab: &HeadsLab, path: &Path) -> Result<(), ReportError> {
    use headlab_report::plot::{Series, line_chart};
    let x = |c: &HeadCount| (c.n_heads as f64).log2();
    let mut series = Vec::new();
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    series.push(Series {
        label: "val loss, mean over seeds".into(),
        points: lab
            .counts
            .iter()
            .map(|c| (x(c), mean(&c.val_losses)))
            .collect(),
        faint: false,
    });
    for (i, seed) in lab.seeds.iter().enumerate() {
        series.push(Series {
            label: format!("val loss, seed {seed}"),
            points: lab
                .counts
                .iter()
                .filter_map(|c| c.val_losses.get(i).map(|&v| (x(c), v)))
                .collect(),
            faint: true,
        });
    }
    line_chart(
        path,
        "lab heads: val loss at equal parameters",
        "log2(heads)",
        "val loss (nats)",
        &series,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A count that does not split d_model is refused before anything is trained or written,
    /// with the counts that do (the divisors of the shipped config's d_model, 64).
    #[test]
    fn a_head_count_that_does_not_divide_d_model_is_refused_before_training() {
        let out = tempfile::tempdir().unwrap();
        let base = lab_config(CONFIG, "configs/lab-heads.toml", &[]).unwrap();
        let runs = Runs {
            observers: &Vec::new,
            resume: false,
            resume_command: "",
            what: "lab",
        };
        let err = heads(base, vec![1], &[3], out.path(), runs).unwrap_err();
        let LabError::HeadsDoNotDivide {
            heads: 3,
            d_model: 64,
            choices,
        } = err
        else {
            panic!("{err}");
        };
        assert_eq!(choices, [1, 2, 4, 8, 16, 32, 64]);
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
    }

    /// A lookup lab with 1 and 2 heads over `seeds`, one val loss per seed from `losses`.
    fn lab_of(seeds: Vec<u64>, losses: [&[f64]; 2]) -> HeadsLab {
        let base = lab_config(CONFIG, "configs/lab-heads.toml", &[]).unwrap();
        let probe = |h: usize| LookupProbe {
            predictions: 10,
            accuracy: 1.0,
            to_near: vec![0.5; h],
            to_far: vec![0.4; h],
            ablated: vec![0.3; h],
            ablated_fits_near: vec![1.0; h],
            ablated_fits_far: vec![0.25; h],
        };
        let count = |h: usize, val_losses: &[f64]| HeadCount {
            n_heads: h,
            d_k: 64 / h,
            params: 100,
            val_losses: val_losses.to_vec(),
            labels: BTreeMap::new(),
            run_labels: vec![BTreeMap::new(); val_losses.len()],
            lookups: vec![probe(h); val_losses.len()],
        };
        HeadsLab {
            base,
            seeds,
            counts: vec![count(1, losses[0]), count(2, losses[1])],
        }
    }

    /// The summary counts the seeds it was given, and with one seed it compares no ranges
    /// (a single value has none) but gives the gap itself.
    #[test]
    fn the_summary_says_how_many_seeds_and_compares_ranges_only_when_there_are_some() {
        let two = summary(&lab_of(vec![1, 2], [&[1.10, 1.12], &[1.00, 1.02]]), "r");
        assert!(two.contains("with two seeds: it does not"), "{two}");
        assert!(!two.contains("three seeds"), "{two}");
        assert!(two.contains("| worse (ranges apart) |"), "{two}");

        let one = summary(&lab_of(vec![7], [&[1.05], &[1.00]]), "r");
        assert!(one.contains("with one seed: it does not"), "{one}");
        for claim in [
            "ranges apart",
            "ranges overlap",
            "across seeds:",
            "seeds' spread",
        ] {
            assert!(!one.contains(claim), "{claim:?} from one seed:\n{one}");
        }
        assert!(one.contains("| +0.0500 (one seed: no range) |"), "{one}");
        assert!(one.contains("`--seeds 1,2,3`"), "{one}");
        assert!(one.contains("1.0500 against 1.0000 with 2 heads"), "{one}");
    }

    /// `val_loss.csv`: one row per count and seed, losses to 5 decimals, the accuracy when
    /// the lookup probe ran, labels as `label count` pairs joined by "; " (no commas).
    #[test]
    fn val_loss_csv_has_a_row_per_run_with_its_loss_accuracy_and_labels() {
        let base = lab_config(CONFIG, "configs/lab-heads.toml", &[]).unwrap();
        let labels = |pairs: &[(&str, usize)]| -> BTreeMap<String, usize> {
            pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
        };
        let lookup = LookupProbe {
            predictions: 10,
            accuracy: 0.875,
            to_near: vec![],
            to_far: vec![],
            ablated: vec![],
            ablated_fits_near: vec![],
            ablated_fits_far: vec![],
        };
        let lab = HeadsLab {
            base,
            seeds: vec![1, 2],
            counts: vec![HeadCount {
                n_heads: 2,
                d_k: 32,
                params: 100,
                val_losses: vec![1.234567, 2.0],
                labels: labels(&[("diffuse", 3), ("previous-token", 1)]),
                run_labels: vec![
                    labels(&[("diffuse", 1), ("previous-token", 1)]),
                    labels(&[("diffuse", 2)]),
                ],
                lookups: vec![lookup],
            }],
        };
        assert_eq!(
            heads_csv(&lab),
            "n_heads,d_k,seed,val_loss,accuracy,head_labels\n\
             2,32,1,1.23457,0.87500,diffuse 1; previous-token 1\n\
             2,32,2,2.00000,,diffuse 2\n"
        );
    }
}
