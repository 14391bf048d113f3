//! Head scores through training: what `train.track_heads_every` records in
//! `head_history.csv`.

use crate::analysis::PatternScores;

/// Pattern scores through training: one `head_history.csv` row per (step, layer,
/// head).
#[derive(Debug, Default, Clone)]
pub struct HeadHistory {
    /// `(step, loss on the repeated half, scores)`.
    pub points: Vec<(usize, f64, Vec<PatternScores>)>,
    /// Per point, each head's gradient norm (NaN where none was recorded: step 0, the step a
    /// run resumed at, files written before the column existed), heads in `points`' order.
    pub grad_norms: Vec<Vec<f64>>,
    /// Per point, each head's copying score ([`crate::circuits::copying_scores`]; NaN in files
    /// written before the column existed), heads in `points`' order.
    pub copying: Vec<Vec<f64>>,
}

/// Header of `head_history.csv`.
pub const HISTORY_HEADER: &str = "step,layer,head,previous_token,induction,duplicate_token,first_token,mean_distance,entropy,repeat_loss,grad_norm,copying\n";

/// How every version of `head_history.csv` starts (`grad_norm` came later, `copying` last).
pub const HISTORY_PREFIX: &str = "step,layer,head,previous_token,";

impl HeadHistory {
    /// Adds a measurement, with each head's gradient norm and copying score (`grad_norms`
    /// and `copying` in the order of `scores`), and returns its CSV rows.
    pub fn push(
        &mut self,
        step: usize,
        repeat_loss: f64,
        scores: Vec<PatternScores>,
        grad_norms: Vec<f64>,
        copying: Vec<f64>,
    ) -> String {
        let mut out = String::new();
        for ((s, g), c) in scores.iter().zip(&grad_norms).zip(&copying) {
            let [prev, ind, dup, first, dist, entropy] = s.values();
            out.push_str(&format!(
                "{step},{},{},{prev:.4},{ind:.4},{dup:.4},{first:.4},{dist:.3},{entropy:.4},\
                 {repeat_loss:.4},{g:.6},{c:.4}\n",
                s.layer, s.head,
            ));
        }
        self.points.push((step, repeat_loss, scores));
        self.grad_norms.push(grad_norms);
        self.copying.push(copying);
        out
    }

    /// Reads `head_history.csv` back (for a resumed run's plot), keeping steps `<= upto`.
    pub fn parse(text: &str, upto: usize) -> Self {
        let mut history = Self::default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let num = |i: usize| {
                f.get(i)
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or(f64::NAN)
            };
            let (Some(step), Some(layer), Some(head)) = (
                f.first().and_then(|v| v.parse::<usize>().ok()),
                f.get(1).and_then(|v| v.parse::<usize>().ok()),
                f.get(2).and_then(|v| v.parse::<usize>().ok()),
            ) else {
                continue;
            };
            if step > upto {
                continue;
            }
            let score = PatternScores {
                layer,
                head,
                previous_token: num(3),
                induction: num(4),
                duplicate_token: num(5),
                first_token: num(6),
                mean_distance: num(7),
                entropy: num(8),
            };
            match history.points.last_mut() {
                Some(last) if last.0 == step => {
                    last.2.push(score);
                    if let Some(g) = history.grad_norms.last_mut() {
                        g.push(num(10));
                    }
                    if let Some(c) = history.copying.last_mut() {
                        c.push(num(11));
                    }
                }
                _ => {
                    history.points.push((step, num(9), vec![score]));
                    history.grad_norms.push(vec![num(10)]);
                    history.copying.push(vec![num(11)]);
                }
            }
        }
        history
    }
}

/// What the induction lab found in a head history.
#[derive(Debug, Clone, PartialEq)]
pub struct Circuit {
    /// The layer-2 head with the highest final induction score.
    pub induction_head: (usize, usize),
    /// Its final induction score.
    pub induction_score: f64,
    /// First tracked step at which that score exceeded 0.5.
    pub crossed_at: Option<usize>,
    /// The layer-1 head with the highest final previous-token score.
    pub previous_token_head: (usize, usize),
    /// Its final previous-token score.
    pub previous_token_score: f64,
    /// Loss on the repeated half at the first step and at the end.
    pub repeat_loss: (f64, f64),
    /// Largest drop of the repeated-half loss between two tracked steps, and where it ends.
    pub steepest_drop: (f64, usize),
}

/// Reads the circuit out of a 2-layer model's head history.
pub fn find_circuit(history: &HeadHistory) -> Option<Circuit> {
    let (first, last) = (history.points.first()?, history.points.last()?);
    let best = |layer: usize, f: fn(&PatternScores) -> f64| {
        last.2
            .iter()
            .filter(|s| s.layer == layer)
            .max_by(|a, b| f(a).total_cmp(&f(b)))
            .map(|s| ((s.layer, s.head), f(s)))
    };
    let (induction_head, induction_score) = best(1, |s| s.induction)?;
    let (previous_token_head, previous_token_score) = best(0, |s| s.previous_token)?;
    let crossed_at = history.points.iter().find_map(|(step, _, scores)| {
        scores
            .iter()
            .find(|s| (s.layer, s.head) == induction_head && s.induction > 0.5)
            .map(|_| *step)
    });
    let steepest_drop = history
        .points
        .windows(2)
        .map(|w| (w[0].1 - w[1].1, w[1].0))
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .unwrap_or((0.0, 0));
    Some(Circuit {
        induction_head,
        induction_score,
        crossed_at,
        previous_token_head,
        previous_token_score,
        repeat_loss: (first.1, last.1),
        steepest_drop,
    })
}
