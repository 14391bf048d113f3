//! PNG line charts with plotters. The font is embedded so labels render on any machine.

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;
use plotters::style::{FontStyle, register_font};

use crate::ReportError;

static FONT: Once = Once::new();

/// Registers the embedded DejaVu Sans as plotters' "sans-serif".
pub fn ensure_font() {
    FONT.call_once(|| {
        let bytes: &'static [u8] = include_bytes!("../assets/DejaVuSans.ttf");
        // Registration only fails on a malformed font, which the embedded one is not.
        let _ = register_font("sans-serif", FontStyle::Normal, bytes);
    });
}

/// One line of a chart.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// `(x, y)` points in x order.
    pub points: Vec<(f64, f64)>,
    /// Drawn thin and pale (e.g. noisy per-iteration losses).
    pub faint: bool,
}

/// A palette that stays readable when printed in grey.
pub const PALETTE: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
];

/// An axis tick: whole numbers (steps) without a decimal point.
fn tick(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        format!("{x}")
    }
}

/// How one series is drawn beyond [`Series`]: its colour, and whether each point gets a
/// marker (for series of a few points, where a bare line hides where the data are).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Style {
    /// Line and marker colour.
    pub color: RGBColor,
    /// A filled circle at each point.
    pub markers: bool,
}

impl Style {
    /// Grey: a reference line that is no series' own (a tolerance, chance).
    pub const NEUTRAL: Style = Style {
        color: RGBColor(110, 110, 110),
        markers: false,
    };

    /// The `i`-th colour of [`PALETTE`], without markers: what [`line_chart`] draws.
    pub fn nth(i: usize) -> Self {
        Self {
            color: PALETTE[i % PALETTE.len()],
            markers: false,
        }
    }
}

/// Draws `series` into a PNG at `path`, coloured in [`PALETTE`]'s order.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<(), ReportError> {
    let styled: Vec<(Series, Style)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), Style::nth(i)))
        .collect();
    line_chart_styled(path, title, x_label, y_label, &styled)
}

/// [`line_chart`] with each series' [`Style`] chosen by the caller: a colour that means the
/// same thing in several pictures (one per backend), markers where points are few.
pub fn line_chart_styled(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[(Series, Style)],
) -> Result<(), ReportError> {
    ensure_font();
    let all = series
        .iter()
        .flat_map(|(s, _)| s.points.iter())
        .filter(|p| p.1.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in all {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.05).max(1e-6);
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| ReportError::draw(path, e);
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        // Room for the last tick's label, which would otherwise be cut at the edge.
        .margin_right(28)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, (y0 - pad)..(y1 + pad))
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .x_label_formatter(&|x| tick(*x))
        .draw()
        .map_err(|e| err(&e))?;
    for (s, look) in series {
        let color = look.color;
        let style = if s.faint {
            color.mix(0.35).stroke_width(1)
        } else {
            color.stroke_width(2)
        };
        let points = s.points.iter().copied().filter(|p| p.1.is_finite());
        let size = if look.markers { 5 } else { 0 };
        chart
            .draw_series(LineSeries::new(points, style).point_size(size))
            .map_err(|e| err(&e))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (18, 0)], style)
                    + Circle::new((9, 0), size, color.filled())
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
