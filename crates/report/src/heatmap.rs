//! A PNG heatmap of values in [0, 1] with labelled rows and columns (the logit lens's stages
//! against positions).

use std::path::Path;

use plotters::prelude::*;

use crate::ReportError;
use crate::plot::ensure_font;

/// White at 0 to dark blue at 1 (the explorer's attention shading, on a square-root scale so
/// small values still show).
fn shade(v: f64) -> RGBColor {
    let v = v.clamp(0.0, 1.0).sqrt();
    let lerp = |a: f64, b: f64| (a + (b - a) * v) as u8;
    RGBColor(lerp(255.0, 8.0), lerp(255.0, 48.0), lerp(255.0, 107.0))
}

/// Draws `values` (row-major, `rows.len() x columns.len()`, each in [0, 1]) as a grid of
/// cells with `title` above, row labels on the left and column labels below; `cells` (the
/// same shape, may be empty) are printed inside the cells.
pub fn heatmap_png(
    path: &Path,
    title: &str,
    rows: &[String],
    columns: &[String],
    values: &[f64],
    cells: &[String],
) -> Result<(), ReportError> {
    ensure_font();
    let (n_rows, n_cols) = (rows.len() as i32, columns.len() as i32);
    let (cell, label_w, top) = (28, 90, 40);
    let size = (
        (label_w + cell * n_cols + 20).max(240) as u32,
        (top + cell * n_rows + 70) as u32,
    );
    let root = BitMapBackend::new(path, size).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| ReportError::draw(path, e);
    root.fill(&WHITE).map_err(|e| err(&e))?;
    root.draw(&Text::new(
        title.to_string(),
        (10, 10),
        ("sans-serif", 16).into_font(),
    ))
    .map_err(|e| err(&e))?;
    let font = ("sans-serif", 13).into_font();
    for (r, row) in rows.iter().enumerate() {
        let y = top + r as i32 * cell;
        root.draw(&Text::new(row.clone(), (6, y + 8), font.clone()))
            .map_err(|e| err(&e))?;
        for c in 0..n_cols as usize {
            let x = label_w + c as i32 * cell;
            let v = values[r * columns.len() + c];
            root.draw(&Rectangle::new(
                [(x, y), (x + cell, y + cell)],
                shade(v).filled(),
            ))
            .map_err(|e| err(&e))?;
            if let Some(text) = cells.get(r * columns.len() + c) {
                let color = if v > 0.4 { WHITE } else { BLACK };
                root.draw(&Text::new(
                    text.clone(),
                    (x + 4, y + 8),
                    font.clone().color(&color),
                ))
                .map_err(|e| err(&e))?;
            }
        }
    }
    let below = top + n_rows * cell + 6;
    let style = font.clone().transform(FontTransform::Rotate90);
    for (c, column) in columns.iter().enumerate() {
        let x = label_w + c as i32 * cell + cell;
        root.draw(&Text::new(column.clone(), (x - 6, below), style.clone()))
            .map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))
}
