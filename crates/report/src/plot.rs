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

/// The decimals a y axis spanning `span` labels with: enough for a tenth of the span, as
/// plotters steps it (six at most).
fn y_decimals(span: f64) -> usize {
    let step = span / 10.0;
    if !(step > 0.0 && step.is_finite()) {
        return 1;
    }
    (-step.log10().floor()).clamp(0.0, 6.0) as usize
}

/// A y axis label with `decimals` decimals; a tick at zero (which plotters' own labels can
/// print as "-0.0" when the axis's steps land a rounding error below it) has no sign.
fn y_tick(y: f64, decimals: usize) -> String {
    let text = format!("{y:.decimals$}");
    match text.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => text,
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
    let (x0, mut x1, y0, y1) = bounds(all, (0.0, 1.0, 0.0, 1.0));
    if x1 - x0 < 1e-9 {
        x1 = x0 + 1.0;
    }
    let pad = ((y1 - y0) * 0.05).max(1e-6);
    let decimals = y_decimals(y1 - y0 + 2.0 * pad);
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
        .y_label_formatter(&|y| y_tick(*y, decimals))
        .draw()
        .map_err(|e| err(&e))?;
    let (ylo, yhi) = (y0 - pad, y1 + pad);
    let unit = |&(x, y): &(f64, f64)| ((x - x0) / (x1 - x0), (y - ylo) / (yhi - ylo));
    let corner = legend_corner(series, &|p| p.1.is_finite(), &unit);
    draw_lines(&mut chart, series, &|p| p.1.is_finite(), corner).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Data coordinates to the plot's unit square.
type ToUnit<'a> = dyn Fn(&(f64, f64)) -> (f64, f64) + 'a;

/// The corner of the plot whose legend box would cover the least of the lines: the lines
/// sampled along each segment, in `unit` coordinates (the plot as the unit square, y up);
/// the box as large as the labels make it on a 900 x 560 chart. Ties go to the upper right.
fn legend_corner(
    series: &[(Series, Style)],
    kept: &dyn Fn(&&(f64, f64)) -> bool,
    unit: &ToUnit,
) -> SeriesLabelPosition {
    let longest = series
        .iter()
        .map(|(s, _)| s.label.chars().count())
        .max()
        .unwrap_or(0);
    // About 8 px a character at 14 px, the swatch and padding; 20 px a line; over the plot
    // area's roughly 800 x 450 px.
    let w = ((longest as f64 * 8.0 + 50.0) / 800.0).min(1.0);
    let h = ((series.len() as f64 * 20.0 + 10.0) / 450.0).min(1.0);
    let mut samples = Vec::new();
    for (s, _) in series {
        let points: Vec<(f64, f64)> = s.points.iter().filter(|p| kept(p)).map(unit).collect();
        for pair in points.windows(2) {
            let ((ax, ay), (bx, by)) = (pair[0], pair[1]);
            samples.extend((0..=40).map(|k| {
                let t = f64::from(k) / 40.0;
                (ax + (bx - ax) * t, ay + (by - ay) * t)
            }));
        }
        if points.len() == 1 {
            samples.push(points[0]);
        }
    }
    let corners = [
        (SeriesLabelPosition::UpperRight, (1.0 - w, 1.0 - h)),
        (SeriesLabelPosition::UpperLeft, (0.0, 1.0 - h)),
        (SeriesLabelPosition::LowerRight, (1.0 - w, 0.0)),
        (SeriesLabelPosition::LowerLeft, (0.0, 0.0)),
    ];
    let covered = |(x, y): (f64, f64)| {
        samples
            .iter()
            .filter(|&&(px, py)| px >= x && px <= x + w && py >= y && py <= y + h)
            .count()
    };
    corners
        .into_iter()
        .map(|(corner, at)| (covered(at), corner))
        .min_by_key(|(n, _)| *n)
        .map_or(SeriesLabelPosition::UpperRight, |(_, c)| c)
}

/// The smallest and largest x and y of `points` (`x0, x1, y0, y1`), or `empty` without any.
fn bounds<'a>(
    points: impl Iterator<Item = &'a (f64, f64)>,
    empty: (f64, f64, f64, f64),
) -> (f64, f64, f64, f64) {
    let start = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let b = points.fold(start, |(x0, x1, y0, y1), &(x, y)| {
        (x0.min(x), x1.max(x), y0.min(y), y1.max(y))
    });
    if b.0 > b.1 { empty } else { b }
}

/// Whether `v` is a whole power of ten (1, 10, 100, 0.1, ...), up to float error.
fn power_of_ten(v: f64) -> bool {
    v > 0.0 && (v.log10() - v.log10().round()).abs() < 1e-9
}

/// A log axis's tick label: the powers of ten only (the lines between stay unlabelled).
fn log_tick(v: f64) -> String {
    if power_of_ten(v) {
        tick(v)
    } else {
        String::new()
    }
}

/// [`line_chart`] on a log x axis (points at x <= 0 are left out: give steps from 1), and a
/// log y axis too with `log_y` (points at y <= 0 left out), ticks at the powers of ten.
pub fn log_chart(
    path: &Path,
    title: &str,
    labels: (&str, &str),
    series: &[Series],
    log_y: bool,
) -> Result<(), ReportError> {
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| ReportError::draw(path, e);
    draw_log(&root, title, labels, series, log_y).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// The whole decades around `lo..hi` (both > 0): 1, 10, 100 ... are all on the axis.
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    let (a, b) = (lo.log10().floor(), hi.log10().ceil());
    (10f64.powf(a), 10f64.powf(b.max(a + 1.0)))
}

/// [`log_chart`]'s drawing, on any backend.
fn draw_log<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[Series],
    log_y: bool,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    ensure_font();
    let kept = |p: &&(f64, f64)| p.0 > 0.0 && p.1.is_finite() && (!log_y || p.1 > 0.0);
    let all = series.iter().flat_map(|s| s.points.iter()).filter(kept);
    let (x0, x1, y0, y1) = bounds(all, (1.0, 10.0, 0.1, 1.0));
    let (x0, x1) = decades(x0, x1);
    root.fill(&WHITE)?;
    let styled: Vec<(Series, Style)> = series
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), Style::nth(i)))
        .collect();
    if log_y {
        let (y0, y1) = decades(y0, y1);
        let mut chart = chart_builder(root, title)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style(("sans-serif", 14))
            .x_label_formatter(&|x| log_tick(*x))
            .y_label_formatter(&|y| log_tick(*y))
            .draw()?;
        let unit = |&(x, y): &(f64, f64)| {
            (
                (x / x0).log10() / (x1 / x0).log10(),
                (y / y0).log10() / (y1 / y0).log10(),
            )
        };
        let corner = legend_corner(&styled, &kept, &unit);
        draw_lines(&mut chart, &styled, &kept, corner)
    } else {
        let pad = ((y1 - y0) * 0.05).max(1e-6);
        let mut chart = chart_builder(root, title)
            .build_cartesian_2d((x0..x1).log_scale(), (y0 - pad)..(y1 + pad))?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .label_style(("sans-serif", 14))
            .x_label_formatter(&|x| log_tick(*x))
            .draw()?;
        let (ylo, yhi) = (y0 - pad, y1 + pad);
        let unit = |&(x, y): &(f64, f64)| {
            (
                (x / x0).log10() / (x1 / x0).log10(),
                (y - ylo) / (yhi - ylo),
            )
        };
        let corner = legend_corner(&styled, &kept, &unit);
        draw_lines(&mut chart, &styled, &kept, corner)
    }
}

/// A chart's frame: title, margins and room for the axes' labels.
fn chart_builder<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 22))
        .margin(12)
        .margin_right(28)
        .x_label_area_size(44)
        .y_label_area_size(64);
    b
}

/// The lines and the legend of a chart whose axes are set up, points filtered by `kept`.
fn draw_lines<'a, DB, CT>(
    chart: &mut ChartContext<'a, DB, CT>,
    series: &[(Series, Style)],
    kept: &dyn Fn(&&(f64, f64)) -> bool,
    corner: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    for (s, look) in series {
        let color = look.color;
        let style = if s.faint {
            color.mix(0.35).stroke_width(1)
        } else {
            color.stroke_width(2)
        };
        let points: Vec<(f64, f64)> = s.points.iter().filter(|p| kept(p)).copied().collect();
        let size = if look.markers { 5 } else { 0 };
        chart
            .draw_series(LineSeries::new(points, style).point_size(size))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + PathElement::new(vec![(0, 0), (18, 0)], style)
                    + Circle::new((9, 0), size, color.filled())
            });
    }
    chart
        .configure_series_labels()
        .position(corner)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
}

/// A bar per `(x, height)` (discrete values such as frequencies), each `0.8` wide, into a PNG
/// at `path`; the x ticks are the bars' whole-number positions.
pub fn bar_chart(
    path: &Path,
    title: &str,
    labels: (&str, &str),
    bars: &[(f64, f64)],
) -> Result<(), ReportError> {
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| ReportError::draw(path, e);
    draw_bars(&root, title, labels, bars).map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}

/// [`bar_chart`]'s drawing, on any backend.
fn draw_bars<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    (x_label, y_label): (&str, &str),
    bars: &[(f64, f64)],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    ensure_font();
    let x0 = bars.iter().map(|b| b.0).fold(f64::MAX, f64::min).min(1.0) - 0.6;
    let x1 = bars
        .iter()
        .map(|b| b.0)
        .fold(f64::MIN, f64::max)
        .max(x0 + 1.6)
        + 0.6;
    let y1 = bars
        .iter()
        .map(|b| b.1)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.05;
    root.fill(&WHITE)?;
    let mut chart = chart_builder(root, title).build_cartesian_2d(x0..x1, 0.0..y1)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 14))
        .x_label_formatter(&|x| {
            if x.fract() == 0.0 {
                tick(*x)
            } else {
                String::new()
            }
        })
        .draw()?;
    chart.draw_series(
        bars.iter()
            .filter(|b| b.1.is_finite())
            .map(|&(x, h)| Rectangle::new([(x - 0.4, 0.0), (x + 0.4, h)], PALETTE[0].filled())),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use plotters::prelude::*;
    use plotters_backend::{
        BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingErrorKind,
    };

    use super::*;

    /// A y label at zero has no sign whichever side of it the axis's step landed; every
    /// label of an axis has the decimals its step needs.
    #[test]
    fn y_ticks_print_zero_without_a_sign() {
        assert_eq!(y_tick(-1e-17, 1), "0.0");
        assert_eq!(y_tick(-0.0, 0), "0");
        assert_eq!(y_tick(0.2 + 1e-12, 1), "0.2");
        assert_eq!(y_tick(-0.4, 1), "-0.4");
        assert_eq!(y_tick(4.0, 1), "4.0");
        assert_eq!(
            (y_decimals(1.4), y_decimals(0.05), y_decimals(300.0)),
            (1, 3, 0)
        );
    }

    /// What a [`Recorder`] saw: the texts drawn (with where) and the filled rectangles.
    #[derive(Default)]
    struct Log {
        texts: Vec<(String, BackendCoord)>,
        filled: Vec<(BackendCoord, BackendCoord)>,
    }

    /// A backend that keeps a [`Log`] in place of pixels, so a test reads a chart's ticks and
    /// bars.
    #[derive(Default)]
    struct Recorder(std::rc::Rc<std::cell::RefCell<Log>>);

    impl DrawingBackend for Recorder {
        type ErrorType = std::fmt::Error;
        fn get_size(&self) -> (u32, u32) {
            (900, 560)
        }
        fn ensure_prepared(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
            Ok(())
        }
        fn present(&mut self) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
            Ok(())
        }
        fn draw_pixel(
            &mut self,
            _: BackendCoord,
            _: BackendColor,
        ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
            Ok(())
        }
        fn draw_rect<S: BackendStyle>(
            &mut self,
            a: BackendCoord,
            b: BackendCoord,
            style: &S,
            fill: bool,
        ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
            if fill && style.color().rgb != (255, 255, 255) {
                self.0.borrow_mut().filled.push((a, b));
            }
            Ok(())
        }
        fn draw_text<S: BackendTextStyle>(
            &mut self,
            text: &str,
            _: &S,
            pos: BackendCoord,
        ) -> Result<(), DrawingErrorKind<Self::ErrorType>> {
            self.0.borrow_mut().texts.push((text.to_string(), pos));
            Ok(())
        }
        fn estimate_text_size<S: BackendTextStyle>(
            &self,
            text: &str,
            _: &S,
        ) -> Result<(u32, u32), DrawingErrorKind<Self::ErrorType>> {
            Ok((7 * text.len() as u32, 14))
        }
    }

    /// A step axis on a log scale, as `lab grokking` draws it: ticks labelled 1, 10, 100 and
    /// 1000, one decade apart at equal distances, nothing between them labelled, and the
    /// axis titled in steps (it read "log10(step + 1)" under ticks 0 to 3).
    #[test]
    fn a_log_axis_ticks_whole_decades_of_steps() {
        let rec = Recorder::default();
        let log = rec.0.clone();
        {
            let root = rec.into_drawing_area();
            let points: Vec<(f64, f64)> = (1..=2000).map(|s| (s as f64, 1.0 / s as f64)).collect();
            let series = [Series {
                label: "loss".into(),
                points,
                faint: false,
            }];
            draw_log(&root, "t", ("step (log scale)", "loss"), &series, true).unwrap();
        }
        let log = log.borrow();
        let at = |label: &str| -> Vec<i32> {
            log.texts
                .iter()
                .filter(|(t, _)| t == label)
                .map(|(_, p)| p.0)
                .collect()
        };
        let xs: Vec<i32> = ["1", "10", "100", "1000", "10000"]
            .iter()
            .map(|l| *at(l).iter().max().unwrap_or_else(|| panic!("no tick {l}")))
            .collect();
        let gaps: Vec<i32> = xs.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(
            gaps.iter().all(|g| (g - gaps[0]).abs() <= 2 && *g > 50),
            "{xs:?}"
        );
        assert!(log.texts.iter().any(|(t, _)| t == "step (log scale)"));
        assert!(
            !log.texts
                .iter()
                .any(|(t, _)| t.contains("log10") || t == "2" || t == "50")
        );
    }

    /// Discrete frequencies are bars, one per value, apart from each other (a line joined
    /// them as if the spectrum were continuous).
    #[test]
    fn a_bar_chart_draws_one_separate_bar_per_value() {
        let rec = Recorder::default();
        let log = rec.0.clone();
        {
            let root = rec.into_drawing_area();
            let bars = [(1.0, 0.5), (2.0, 0.0), (3.0, 0.25), (4.0, 0.1)];
            draw_bars(&root, "t", ("frequency k", "share"), &bars).unwrap();
        }
        // The background is white; the rest filled is the bars (the zero one is flat).
        let mut bars: Vec<_> = log.borrow().filled.clone();
        bars.sort_by_key(|(a, _)| a.0);
        assert_eq!(bars.len(), 4, "{bars:?}");
        for w in bars.windows(2) {
            assert!(w[0].1.0 < w[1].0.0, "bars touch: {bars:?}");
        }
        let heights: Vec<i32> = bars.iter().map(|(a, b)| (b.1 - a.1).abs()).collect();
        assert!(heights[0] > heights[2] && heights[2] > heights[3] && heights[3] > heights[1]);
    }

    /// Issue 79: prune.png's legend sat over its rising curves. The legend goes to the
    /// corner the lines leave empty: the upper left of curves rising to the right (val loss
    /// as heads go), the upper right of falling ones (a training loss), the lower left of
    /// agreement falling from 1.
    #[test]
    fn the_legend_goes_where_the_lines_are_not() {
        let series = |f: &dyn Fn(f64) -> f64| -> Vec<(Series, Style)> {
            (0..4)
                .map(|k| {
                    let points = (0..=8)
                        .map(|x| (f64::from(x), f(f64::from(x)) + 0.01 * f64::from(k)))
                        .collect();
                    (
                        Series {
                            label: format!("order {k} (a label of some length)"),
                            points,
                            faint: false,
                        },
                        Style::nth(k as usize),
                    )
                })
                .collect()
        };
        let unit = |&(x, y): &(f64, f64)| (x / 8.0, y);
        let kept = |_: &&(f64, f64)| true;
        // Flat at the bottom until the last heads go, then up to the top right.
        let rising = series(&|x| if x < 6.0 { 0.05 } else { (x - 6.0) / 2.0 });
        assert_eq!(
            legend_corner(&rising, &kept, &unit),
            SeriesLabelPosition::UpperLeft
        );
        let falling = series(&|x| 1.0 - x / 8.0 * 0.9);
        assert_eq!(
            legend_corner(&falling, &kept, &unit),
            SeriesLabelPosition::UpperRight
        );
        // Agreement: 1 until the last heads go, then down to 0.5.
        let agreement = series(&|x| {
            if x < 6.0 {
                0.95
            } else {
                0.95 - (x - 6.0) / 4.0
            }
        });
        assert_eq!(
            legend_corner(&agreement, &kept, &unit),
            SeriesLabelPosition::LowerRight
        );
    }
}
