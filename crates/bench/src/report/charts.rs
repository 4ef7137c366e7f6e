//! Line charts drawn with plotters, once as SVG (inlined in the HTML page) and once as PNG.
//! One drawing function serves both backends, so the two never disagree.
//!
//! Logarithmic axes are drawn as log10 of the values on a linear axis, with tick labels turned
//! back into values: it keeps every chart one type, and plotters' log ranges need a different
//! chart type per axis combination.

use std::path::Path;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::error::BenchError;

/// Chart size in pixels (SVG user units and PNG pixels).
pub const SIZE: (u32, u32) = (900, 480);

/// Distinguishable colours (Tableau 10), one per target in spec order.
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// One line on a chart.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    /// Index into the palette (the target's position in the spec).
    pub color: usize,
    pub points: Vec<(f64, f64)>,
    /// (x, low, high): a shaded band around the line (min–max over rounds).
    pub band: Vec<(f64, f64, f64)>,
    pub dashed: bool,
    /// Points drawn as hollow rings: measurements bounded by the load generator, where the
    /// line understates the server.
    pub hollow: Vec<(f64, f64)>,
}

/// One chart: title, axes, lines.
#[derive(Debug, Clone)]
pub struct Chart {
    /// File stem and HTML id.
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub log_x: bool,
    pub log_y: bool,
    /// Start the y axis at zero (counts and shares); latency starts at its minimum instead.
    pub y_from_zero: bool,
    pub series: Vec<Series>,
}

/// The TrueType font every label is drawn with, embedded so that charts look the same on a
/// machine without fonts.
fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

impl Chart {
    /// The chart as SVG markup.
    ///
    /// # Errors
    /// [`BenchError::Chart`] when plotters fails.
    pub fn svg(&self) -> Result<String, BenchError> {
        register_font();
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, SIZE).into_drawing_area();
            self.draw(&root).map_err(|e| self.err(&e))?;
            root.present().map_err(|e| self.err(&e))?;
        }
        Ok(out)
    }

    /// Writes the chart as a PNG file.
    ///
    /// # Errors
    /// [`BenchError::Chart`] when plotters or the PNG encoder fails.
    pub fn png(&self, path: &Path) -> Result<(), BenchError> {
        register_font();
        let root = BitMapBackend::new(path, SIZE).into_drawing_area();
        self.draw(&root).map_err(|e| self.err(&e))?;
        root.present().map_err(|e| self.err(&e))
    }

    fn err(&self, e: &dyn std::fmt::Display) -> BenchError {
        BenchError::Chart {
            chart: self.id.clone(),
            message: e.to_string(),
        }
    }

    fn tx(&self, x: f64) -> f64 {
        if self.log_x {
            x.max(1e-9).log10()
        } else {
            x
        }
    }

    fn ty(&self, y: f64) -> f64 {
        if self.log_y {
            y.max(1e-9).log10()
        } else {
            y
        }
    }

    fn bounds(&self) -> ((f64, f64), (f64, f64)) {
        let xs = self.series.iter().flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.0)
                .chain(s.band.iter().map(|b| b.0))
        });
        let ys = self.series.iter().flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.1)
                .chain(s.band.iter().flat_map(|b| [b.1, b.2]))
        });
        let fin = |it: &mut dyn Iterator<Item = f64>| {
            it.filter(|v| v.is_finite())
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
                    (a.min(v), b.max(v))
                })
        };
        let (x0, x1) = fin(&mut xs.map(|x| self.tx(x)));
        let (mut y0, y1) = fin(&mut ys.filter(|&y| !self.log_y || y > 0.0).map(|y| self.ty(y)));
        if !x0.is_finite() {
            return ((0.0, 1.0), (0.0, 1.0));
        }
        if self.y_from_zero && !self.log_y {
            y0 = y0.min(0.0);
        }
        let pad_x = if x1 > x0 { (x1 - x0) * 0.02 } else { 0.5 };
        let (y0, y1) = if y1 > y0 {
            (y0, y1)
        } else {
            (y0 - 0.5, y0 + 0.5)
        };
        let pad_y = (y1 - y0) * 0.06;
        let y_lo = if self.y_from_zero && !self.log_y && y0 >= 0.0 {
            0.0
        } else {
            y0 - pad_y
        };
        ((x0 - pad_x, x1 + pad_x), (y_lo, y1 + pad_y))
    }

    fn draw<DB: DrawingBackend>(
        &self,
        root: &DrawingArea<DB, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
        root.fill(&WHITE)?;
        let ((x0, x1), (y0, y1)) = self.bounds();
        let mut chart = ChartBuilder::on(root)
            .caption(&self.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(72)
            .build_cartesian_2d(x0..x1, y0..y1)?;
        let (log_x, log_y) = (self.log_x, self.log_y);
        chart
            .configure_mesh()
            .x_desc(&self.x_label)
            .y_desc(&self.y_label)
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .light_line_style(RGBColor(235, 235, 235))
            .x_label_formatter(&|v| axis_label(*v, log_x))
            .y_label_formatter(&|v| axis_label(*v, log_y))
            .draw()?;
        for s in &self.series {
            let color = PALETTE[s.color % PALETTE.len()];
            if s.band.len() > 1 {
                let mut poly: Vec<(f64, f64)> = s
                    .band
                    .iter()
                    .map(|b| (self.tx(b.0), self.ty(b.2)))
                    .collect();
                poly.extend(s.band.iter().rev().map(|b| (self.tx(b.0), self.ty(b.1))));
                chart.draw_series(std::iter::once(Polygon::new(
                    poly,
                    color.mix(0.18).filled(),
                )))?;
            }
            let pts: Vec<(f64, f64)> = s
                .points
                .iter()
                .filter(|p| !log_y || p.1 > 0.0)
                .map(|p| (self.tx(p.0), self.ty(p.1)))
                .collect();
            let style = ShapeStyle {
                color: color.to_rgba(),
                filled: false,
                stroke_width: 2,
            };
            let anno = if s.dashed {
                chart.draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))?
            } else {
                chart.draw_series(LineSeries::new(pts.clone(), style))?
            };
            let dashed = s.dashed;
            anno.label(&s.name).legend(move |(x, y)| {
                let end = if dashed { x + 8 } else { x + 20 };
                PathElement::new(
                    vec![(x, y), (end, y)],
                    ShapeStyle {
                        color: color.to_rgba(),
                        filled: false,
                        stroke_width: 2,
                    },
                )
            });
            chart.draw_series(
                s.hollow
                    .iter()
                    .map(|p| Circle::new((self.tx(p.0), self.ty(p.1)), 5, color.stroke_width(2))),
            )?;
            // Points mark the measured levels; too many points would hide the line.
            if pts.len() <= 40 {
                chart.draw_series(pts.iter().map(|&p| Circle::new(p, 2, color.filled())))?;
            }
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .label_font(("sans-serif", 13))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .draw()?;
        Ok(())
    }
}

/// Tick label for an axis value (or its log10).
fn axis_label(v: f64, log: bool) -> String {
    let v = if log { 10f64.powf(v) } else { v };
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || a == 0.0 || (a >= 1.0 && (v - v.round()).abs() < 1e-6) {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(axis_label(2.0, true), "100");
        assert_eq!(axis_label(150_000.0, false), "150k");
        assert_eq!(axis_label(0.25, false), "0.25");
    }

    #[test]
    fn svg_names_every_series() {
        let c = Chart {
            id: "t".into(),
            title: "req/s <test>".into(),
            x_label: "connections".into(),
            y_label: "req/s".into(),
            log_x: true,
            log_y: false,
            y_from_zero: true,
            series: ["alpha", "beta"]
                .iter()
                .enumerate()
                .map(|(i, n)| Series {
                    name: (*n).into(),
                    color: i,
                    points: vec![(1.0, 10.0), (10.0, 20.0)],
                    band: vec![(1.0, 9.0, 11.0), (10.0, 19.0, 21.0)],
                    dashed: i == 1,
                    hollow: vec![],
                })
                .collect(),
        };
        let svg = c.svg().unwrap();
        assert!(svg.contains("alpha") && svg.contains("beta"));
        assert!(svg.contains("&lt;test&gt;"), "titles are escaped");
    }
}
