//! `heads.png`: tracked head scores against training step.

use std::path::Path;

use headlab_heads::{HeadHistory, PatternScores};
use plotters::prelude::*;

use crate::ReportError;
use crate::plot::{PALETTE, ensure_font};

/// Draws every head's induction (solid) and previous-token (pale) score against step, with
/// the loss on the repeated half on a second axis.
// Over 80 lines on purpose: one chart: plotters' builder calls in a row.
pub fn history_png(history: &HeadHistory, path: &Path) -> Result<(), ReportError> {
    ensure_font();
    let err = |e: &dyn std::fmt::Display| ReportError::draw(path, e);
    let x1 = history.points.last().map_or(1, |p| p.0.max(1)) as f64;
    let loss_max = history
        .points
        .iter()
        .map(|p| p.1)
        .filter(|v| v.is_finite())
        .fold(0.1, f64::max);
    let root = BitMapBackend::new(path, (960, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("head scores through training", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .right_y_label_area_size(80)
        .build_cartesian_2d(0.0..x1, 0.0..1.0)
        .map_err(|e| err(&e))?
        .set_secondary_coord(0.0..x1, 0.0..loss_max * 1.05);
    chart
        .configure_mesh()
        .x_desc("step")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_desc("score (solid: induction, pale: previous-token)")
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .configure_secondary_axes()
        .y_desc("repeated-half loss (black)")
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    let heads: Vec<(usize, usize)> = history.points.first().map_or(Vec::new(), |p| {
        p.2.iter().map(|s| (s.layer, s.head)).collect()
    });
    for (k, &(layer, head)) in heads.iter().enumerate() {
        let color = PALETTE[k % PALETTE.len()];
        let series = |f: fn(&PatternScores) -> f64| {
            history
                .points
                .iter()
                .filter_map(|(step, _, scores)| {
                    scores
                        .iter()
                        .find(|s| s.layer == layer && s.head == head)
                        .map(|s| (*step as f64, f(s)))
                })
                .collect::<Vec<_>>()
        };
        chart
            .draw_series(LineSeries::new(
                series(|s| s.induction),
                color.stroke_width(2),
            ))
            .map_err(|e| err(&e))?
            .label(format!("{layer}.{head}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(LineSeries::new(
                series(|s| s.previous_token),
                color.mix(0.35).stroke_width(1),
            ))
            .map_err(|e| err(&e))?;
    }
    chart
        .draw_secondary_series(LineSeries::new(
            history
                .points
                .iter()
                .map(|p| (p.0 as f64, p.1))
                .filter(|p| p.1.is_finite()),
            BLACK.stroke_width(2),
        ))
        .map_err(|e| err(&e))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
