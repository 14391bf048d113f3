//! `circuit.svg`: a circuit found by `headlab circuit`, drawn as the model runs from top to
//! bottom (the embedding, each layer's heads, its MLP, the logits), each kept edge a curve
//! from its sender into its receiver, into a head's Q, K or V port (coloured, and labelled).

use std::fmt::Write as _;

use headlab_heads::discovery::{Discovery, Receiver, Sender};
use headlab_model::HeadInput;

const ROW: f64 = 110.0;
const COLUMN: f64 = 90.0;
const PORT: f64 = 14.0;

/// The colour of an edge into `input` (`None`: an MLP or the logits).
fn colour(input: Option<HeadInput>) -> &'static str {
    match input {
        Some(HeadInput::Q) => "#1f77b4",
        Some(HeadInput::K) => "#d62728",
        Some(HeadInput::V) => "#2ca02c",
        None => "#555555",
    }
}

/// The SVG of `found` on a model of `n_layers` layers of `n_heads` heads (`mlp`: with MLPs).
pub fn circuit_svg(found: &Discovery, n_layers: usize, n_heads: usize, mlp: bool) -> String {
    let width = ((n_heads.max(1) as f64 + 1.0) * COLUMN + 160.0).max(640.0);
    let rows_per_layer = if mlp { 2 } else { 1 };
    let rows = 2 + n_layers * rows_per_layer;
    let height = rows as f64 * ROW + 60.0;
    let centre = width / 2.0;
    let row_y = |r: usize| 75.0 + r as f64 * ROW;
    let head_x = |h: usize| centre + (h as f64 - (n_heads as f64 - 1.0) / 2.0) * COLUMN;
    let sender_at = |s: Sender| match s {
        Sender::Embed => (centre, row_y(0)),
        Sender::Head(l, h) => (head_x(h), row_y(1 + l * rows_per_layer)),
        Sender::Mlp(l) => (centre, row_y(2 + l * rows_per_layer)),
    };
    let receiver_at = |r: Receiver| match r {
        Receiver::Head(l, h, input) => {
            let dx = match input {
                HeadInput::Q => -PORT,
                HeadInput::K => 0.0,
                HeadInput::V => PORT,
            };
            (head_x(h) + dx, row_y(1 + l * rows_per_layer))
        }
        Receiver::Mlp(l) => (centre, row_y(2 + l * rows_per_layer)),
        Receiver::Logits => (centre, row_y(rows - 1)),
    };
    let kept: Vec<_> = found.edges.iter().filter(|e| e.kept).collect();
    let largest = kept
        .iter()
        .map(|e| e.score.abs())
        .fold(0.0f64, f64::max)
        .max(1e-12);
    let used = |name: String| {
        kept.iter()
            .any(|e| e.edge.from.name() == name || e.edge.to.name() == name)
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         font-family=\"sans-serif\" font-size=\"13\">\n<rect width=\"100%\" height=\"100%\" \
         fill=\"white\"/>\n<text x=\"10\" y=\"22\" font-size=\"15\">{} circuit: {} of {} \
         edges, {:.2} of the gap recovered</text>\n<text x=\"10\" y=\"40\" fill=\"#555\">edges \
         into a head's Q blue, K red, V green, into an MLP or the logits grey; the wider, the \
         larger the score</text>\n",
        found.method.name(),
        kept.len(),
        found.edges.len(),
        found.recovered()
    );
    for e in &kept {
        let (x1, y1) = sender_at(e.edge.from);
        let (x2, y2) = receiver_at(e.edge.to);
        let (y1, y2) = (y1 + 16.0, y2 - 16.0);
        let bend = (y2 - y1) / 2.0;
        let input = match e.edge.to {
            Receiver::Head(_, _, input) => Some(input),
            _ => None,
        };
        let _ = writeln!(
            s,
            "<path d=\"M {x1:.1} {y1:.1} C {x1:.1} {:.1}, {x2:.1} {:.1}, {x2:.1} {y2:.1}\" \
             fill=\"none\" stroke=\"{}\" stroke-opacity=\"0.8\" stroke-width=\"{:.2}\"><title>{}: \
             {:+.4}</title></path>",
            y1 + bend,
            y2 - bend,
            colour(input),
            1.0 + 5.0 * e.score.abs() / largest,
            e.edge.label(),
            e.score
        );
    }
    let mut node = |x: f64, y: f64, label: String, wide: bool| {
        let on = used(label.clone());
        let w = if wide { 90.0 } else { 56.0 };
        let _ = writeln!(
            s,
            "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{w}\" height=\"32\" rx=\"6\" fill=\"{}\" \
             stroke=\"{}\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"{}\">{label}</text>",
            x - w / 2.0,
            y - 16.0,
            if on { "#fdf6e3" } else { "#f4f4f4" },
            if on { "#333" } else { "#bbb" },
            y + 5.0,
            if on { "#000" } else { "#999" },
        );
    };
    node(centre, row_y(0), "embed".into(), true);
    for l in 0..n_layers {
        for h in 0..n_heads {
            node(
                head_x(h),
                row_y(1 + l * rows_per_layer),
                format!("{l}.{h}"),
                false,
            );
        }
        if mlp {
            node(
                centre,
                row_y(2 + l * rows_per_layer),
                format!("mlp {l}"),
                true,
            );
        }
    }
    node(centre, row_y(rows - 1), "logits".into(), true);
    // The ports' letters above each head of the circuit.
    for l in 0..n_layers {
        for h in 0..n_heads {
            for (input, dx) in [
                (HeadInput::Q, -PORT),
                (HeadInput::K, 0.0),
                (HeadInput::V, PORT),
            ] {
                let into = kept
                    .iter()
                    .any(|e| e.edge.to == Receiver::Head(l, h, input));
                if into {
                    let _ = writeln!(
                        s,
                        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\" \
                         fill=\"{}\">{}</text>",
                        head_x(h) + dx,
                        row_y(1 + l * rows_per_layer) - 19.0,
                        colour(Some(input)),
                        input.name()
                    );
                }
            }
        }
    }
    s += "</svg>\n";
    s
}
