//! A PNG heatmap of values in [0, 1] with labelled rows and columns (the logit lens's stages
//! against positions), and a colour bar that says what the shades mean.

use std::path::Path;

use plotters::coord::Shift;
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

/// WCAG relative luminance of an sRGB colour, 0 (black) to 1 (white).
fn luminance(c: RGBColor) -> f64 {
    let lin = |u: u8| {
        let u = f64::from(u) / 255.0;
        if u <= 0.04045 {
            u / 12.92
        } else {
            ((u + 0.055) / 1.055).powf(2.4)
        }
    };
    0.2126 * lin(c.0) + 0.7152 * lin(c.1) + 0.0722 * lin(c.2)
}

/// WCAG contrast ratio of two colours (1 to 21).
fn contrast(a: RGBColor, b: RGBColor) -> f64 {
    let (la, lb) = (luminance(a), luminance(b));
    (la.max(lb) + 0.05) / (la.min(lb) + 0.05)
}

/// Black or white, whichever reads better on `background`: chosen by the cell's brightness,
/// not by its value, so mid shades get the colour that contrasts with them.
fn text_on(background: RGBColor) -> RGBColor {
    if contrast(BLACK, background) >= contrast(WHITE, background) {
        BLACK
    } else {
        WHITE
    }
}

/// Cell side, label column, title band and colour bar width, in pixels.
const CELL: i32 = 40;
const LABEL_W: i32 = 130;
const TOP: i32 = 48;
const BAR_W: i32 = 18;
/// The values the colour bar labels (on the square-root scale most of the bar is small values).
const BAR_TICKS: [f64; 5] = [0.0, 0.1, 0.25, 0.5, 1.0];

/// The height of the column labels below the grid: they are drawn turned a quarter, so as
/// tall as the longest is long (about 9 pixels a character at 15 px), and the x axis's title.
fn below_height(columns: &[String]) -> i32 {
    let longest = columns.iter().map(|c| c.chars().count()).max().unwrap_or(1) as i32;
    6 + 9 * longest.max(1) + 8 + X_TITLE_H
}

/// The x axis title's band.
const X_TITLE_H: i32 = 20;

/// The colour bar is as tall as the grid, and at least this many cells (room for its ticks).
const BAR_CELLS: i32 = 3;

/// The picture's size for `n_rows` rows and `columns`: the grid with its labels and title
/// below it, and the colour bar (at least [`BAR_CELLS`] cells tall) beside it; no band is left
/// empty.
fn size(n_rows: i32, columns: &[String], (title, x_title): (&str, &str)) -> (u32, u32) {
    let n_cols = columns.len() as i32;
    let grid = CELL * n_rows + below_height(columns);
    // As wide as the titles too: a short prompt's grid is narrower than its words.
    let (title_w, x_title_w) = (text_width(title, TITLE_PX), text_width(x_title, LABEL_PX));
    let width = (LABEL_W + CELL * n_cols + 24 + BAR_W + 50)
        .max(10 + title_w + 10)
        .max(LABEL_W + x_title_w + 10)
        .max(420);
    (
        width as u32,
        (TOP + grid.max(CELL * n_rows.max(BAR_CELLS) + 20) + 4) as u32,
    )
}

/// The title's and the labels' font sizes, in pixels.
const TITLE_PX: f64 = 18.0;
const LABEL_PX: f64 = 15.0;

/// How wide `text` is drawn in the embedded font at `px` pixels (an overestimate of a pixel
/// a character where the font cannot say).
fn text_width(text: &str, px: f64) -> i32 {
    ensure_font();
    ("sans-serif", px)
        .into_font()
        .box_size(text)
        .map_or((px * 0.6) as i32 * text.chars().count() as i32, |(w, _)| {
            w as i32
        })
}

/// Draws `values` (row-major, `rows.len() x columns.len()`, each in [0, 1]) as a grid of
/// cells with `title` above, row labels on the left, column labels below and a colour bar on
/// the right; `cells` (the same shape, may be empty) are printed inside the cells in black or
/// white, whichever contrasts more with the cell.
pub fn heatmap_png(
    path: &Path,
    (title, x_title): (&str, &str),
    rows: &[String],
    columns: &[String],
    values: &[f64],
    cells: &[String],
) -> Result<(), ReportError> {
    let root = BitMapBackend::new(path, size(rows.len() as i32, columns, (title, x_title)))
        .into_drawing_area();
    draw(&root, (title, x_title), rows, columns, values, cells)
        .map_err(|e| ReportError::draw(path, &e))?;
    root.present().map_err(|e| ReportError::draw(path, &e))
}

/// [`heatmap_png`]'s drawing, on any bitmap area.
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    (title, x_title): (&str, &str),
    rows: &[String],
    columns: &[String],
    values: &[f64],
    cells: &[String],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    ensure_font();
    let (n_rows, n_cols) = (rows.len() as i32, columns.len() as i32);
    root.fill(&WHITE)?;
    root.draw(&Text::new(
        title.to_string(),
        (10, 12),
        ("sans-serif", TITLE_PX).into_font(),
    ))?;
    let font = ("sans-serif", LABEL_PX).into_font();
    for (r, row) in rows.iter().enumerate() {
        let y = TOP + r as i32 * CELL;
        root.draw(&Text::new(row.clone(), (6, y + 12), font.clone()))?;
        for c in 0..n_cols as usize {
            let x = LABEL_W + c as i32 * CELL;
            let fill = shade(values[r * columns.len() + c]);
            root.draw(&Rectangle::new(
                [(x, y), (x + CELL, y + CELL)],
                fill.filled(),
            ))?;
            if let Some(text) = cells.get(r * columns.len() + c) {
                root.draw(&Text::new(
                    text.clone(),
                    (x + 5, y + 12),
                    font.clone().color(&text_on(fill)),
                ))?;
            }
        }
    }
    let below = TOP + n_rows * CELL + 6;
    let style = font.clone().transform(FontTransform::Rotate90);
    for (c, column) in columns.iter().enumerate() {
        let x = LABEL_W + c as i32 * CELL + CELL / 2 + 8;
        root.draw(&Text::new(column.clone(), (x, below), style.clone()))?;
    }
    let title_y = TOP + n_rows * CELL + below_height(columns) - X_TITLE_H + 2;
    root.draw(&Text::new(
        x_title.to_string(),
        (LABEL_W, title_y),
        ("sans-serif", LABEL_PX).into_font(),
    ))?;
    // The colour bar: 1 at the top, 0 at the bottom, as tall as the grid (at least
    // BAR_CELLS cells).
    let (x0, y0, h) = (
        LABEL_W + n_cols * CELL + 24,
        TOP,
        CELL * n_rows.max(BAR_CELLS),
    );
    let at = |v: f64| y0 + ((1.0 - v.sqrt()) * f64::from(h)).round() as i32;
    for y in y0..y0 + h {
        let v = (1.0 - f64::from(y - y0) / f64::from(h)).powi(2);
        root.draw(&Rectangle::new(
            [(x0, y), (x0 + BAR_W, y + 1)],
            shade(v).filled(),
        ))?;
    }
    root.draw(&Rectangle::new([(x0, y0), (x0 + BAR_W, y0 + h)], BLACK))?;
    let small = ("sans-serif", 13).into_font();
    for v in BAR_TICKS {
        let y = at(v);
        root.draw(&PathElement::new(
            vec![(x0 + BAR_W, y), (x0 + BAR_W + 4, y)],
            BLACK,
        ))?;
        root.draw(&Text::new(
            format!("{v}"),
            (x0 + BAR_W + 6, y - 7),
            small.clone(),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every shade gets the text colour that contrasts more with it, and that always reads:
    /// WCAG's 4.5:1 for normal text. (Switching at value 0.4 put white on shades just past it
    /// at 4.4:1 and black on darker cells below it.)
    #[test]
    fn cell_text_contrasts_with_every_shade() {
        for k in 0..=1000 {
            let fill = shade(f64::from(k) / 1000.0);
            let text = text_on(fill);
            let other = if text == BLACK { WHITE } else { BLACK };
            assert!(
                contrast(text, fill) >= contrast(other, fill),
                "value {k}/1000"
            );
            assert!(contrast(text, fill) >= 4.5, "value {k}/1000: {fill:?}");
        }
    }

    /// The picture is drawn at 40-pixel cells with a colour bar from the darkest shade at
    /// the top to white at the bottom, right of the grid.
    #[test]
    fn the_heatmap_has_large_cells_and_a_colour_bar() {
        let (rows, cols) = (vec!["a".to_string(), "b".into()], vec!["x".to_string(); 3]);
        let (w, h) = size(2, &cols, ("t", "x"));
        let mut buf = vec![0u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            let values = [0.0, 0.5, 1.0, 1.0, 0.0, 0.25];
            draw(&root, ("t", "x"), &rows, &cols, &values, &[]).unwrap();
            root.present().unwrap();
        }
        let pixel = |x: i32, y: i32| {
            let i = ((y as u32 * w + x as u32) * 3) as usize;
            RGBColor(buf[i], buf[i + 1], buf[i + 2])
        };
        // Cell (0, 2) holds 1: the darkest shade, all 40 pixels across.
        let (cx, cy) = (LABEL_W + 2 * CELL, TOP);
        assert_eq!(pixel(cx + 1, cy + 20), shade(1.0));
        assert_eq!(pixel(cx + CELL - 2, cy + 20), shade(1.0));
        let bar = LABEL_W + 3 * CELL + 24 + BAR_W / 2;
        assert!(luminance(pixel(bar, TOP + 1)) < luminance(shade(0.95)));
        assert!(luminance(pixel(bar, TOP + BAR_CELLS * CELL - 2)) > 0.95);
        let mid = pixel(bar, TOP + 2 * CELL);
        assert!(mid != WHITE && mid != shade(1.0), "{mid:?}");
    }

    /// The picture ends where its content does: below the grid come the column labels (as
    /// tall as the longest), the x axis's title, and nothing more. (A three-row lens of
    /// one-letter columns was a third blank at the bottom, with no axis title.)
    #[test]
    fn the_heatmap_leaves_no_blank_band_and_titles_its_x_axis() {
        let rows: Vec<String> = ["0_pre", "1_pre", "final"].map(String::from).to_vec();
        let cols: Vec<String> = "the dogs".chars().map(String::from).collect();
        let (w, h) = size(3, &cols, ("t", "the next token"));
        let mut buf = vec![255u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            let values = vec![0.5; 3 * cols.len()];
            draw(&root, ("t", "the next token"), &rows, &cols, &values, &[]).unwrap();
            root.present().unwrap();
        }
        let inked = |y: u32| {
            (0..LABEL_W as u32 + CELL as u32 * cols.len() as u32).any(|x| {
                let i = ((y * w + x) * 3) as usize;
                buf[i] < 128
            })
        };
        // The last row with ink under the grid is the title's, within 12 px of the bottom.
        let last = (0..h).rev().find(|&y| inked(y)).unwrap();
        assert!(
            h - last <= 16,
            "{} blank rows at the bottom of {h}",
            h - last
        );
        let grid_end = (TOP + 3 * CELL) as u32;
        let title_rows = (grid_end + 20..h).filter(|&y| inked(y)).count();
        assert!(title_rows >= 8, "no x axis title under the labels");
    }

    /// Issue 79: a 5-token prompt's patch picture cut its title ("(0 corrupte"): the picture
    /// is as wide as its titles, and no ink touches its right edge.
    #[test]
    fn long_titles_fit_a_narrow_grid() {
        let rows: Vec<String> = ["layer 0", "layer 1"].map(String::from).to_vec();
        let cols: Vec<String> = ["the", "spy", "sees", "the", "sp"]
            .map(String::from)
            .to_vec();
        let titles = (
            "attn_out: share of the clean answer restored (0 corrupted, 1 clean)",
            "position: the token read there (patched from the clean run)",
        );
        let (w, h) = size(2, &cols, titles);
        let mut buf = vec![255u8; (w * h * 3) as usize];
        {
            let root = BitMapBackend::with_buffer(&mut buf, (w, h)).into_drawing_area();
            let values = vec![0.5; 2 * cols.len()];
            draw(&root, titles, &rows, &cols, &values, &[]).unwrap();
            root.present().unwrap();
        }
        let inked = |x: u32, y: u32| {
            let i = ((y * w + x) * 3) as usize;
            buf[i] < 128
        };
        // The right-most 6 columns of pixels are blank from top to bottom, and the title's
        // ink reaches past the grid (so it was drawn whole, not squeezed).
        for y in 0..h {
            for x in w - 6..w {
                assert!(!inked(x, y), "ink at ({x}, {y}) of {w} x {h}");
            }
        }
        let grid_right = (LABEL_W + CELL * 5 + 24 + BAR_W + 50) as u32;
        assert!((0..TOP as u32).any(|y| (grid_right..w).any(|x| inked(x, y))));
    }
}
