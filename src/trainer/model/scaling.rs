//! Running per-feature mean and standard deviation, so that the linear models train on
//! standardized features whatever the scale of the raw ones.
//!
//! Moments of each batch are merged into the model's with Chan's parallel update of
//! Welford's algorithm, which stays accurate for large values.

use super::features::Rows;

/// Count, mean and sum of squared deviations of each feature.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Moments {
    count: f64,
    mean: Vec<f64>,
    m2: Vec<f64>,
}

/// How raw features map to standardized ones: `(x - shift) * scale`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Scaling {
    pub shift: Vec<f64>,
    pub scale: Vec<f64>,
}

impl Moments {
    /// The moments of the rows of one batch with `width` features.
    pub fn of_rows(rows: &Rows, width: usize) -> Moments {
        let mut moments = Moments {
            count: 0.0,
            mean: vec![0.0; width],
            m2: vec![0.0; width],
        };
        for x in rows.features.chunks_exact(width.max(1)) {
            moments.count += 1.0;
            for ((mean, m2), &x) in moments.mean.iter_mut().zip(&mut moments.m2).zip(x) {
                let delta = x - *mean;
                *mean += delta / moments.count;
                *m2 += delta * (x - *mean);
            }
        }
        moments
    }

    /// Whether the moments describe `width` features (or no row at all).
    pub fn fits(&self, width: usize) -> bool {
        self.is_empty() || (self.mean.len() == width && self.m2.len() == width)
    }

    /// Whether no row was seen.
    pub fn is_empty(&self) -> bool {
        self.count == 0.0
    }

    /// Adds the rows described by `other`.
    pub fn merge(&mut self, other: &Moments) {
        if other.is_empty() {
            return;
        }
        if self.is_empty() {
            *self = other.clone();
            return;
        }
        let count = self.count + other.count;
        let parts = self.mean.iter_mut().zip(&mut self.m2);
        for ((mean, m2), (other_mean, other_m2)) in parts.zip(other.mean.iter().zip(&other.m2)) {
            let delta = other_mean - *mean;
            *mean += delta * other.count / count;
            *m2 += other_m2 + delta * delta * self.count * other.count / count;
        }
        self.count = count;
    }

    /// Centers on the mean and divides by the standard deviation (1 for a constant
    /// feature); the identity when no row was seen.
    pub fn scaling(&self, width: usize) -> Scaling {
        if self.is_empty() {
            return Scaling {
                shift: vec![0.0; width],
                scale: vec![1.0; width],
            };
        }
        let scale = self.m2.iter().map(|m2| {
            let deviation = (m2 / self.count).sqrt();
            if deviation > 1e-12 {
                1.0 / deviation
            } else {
                1.0
            }
        });
        Scaling {
            shift: self.mean.clone(),
            scale: scale.collect(),
        }
    }
}

impl Scaling {
    /// `x` standardized into `out`.
    pub fn apply(&self, x: &[f64], out: &mut [f64]) {
        let factors = self.shift.iter().zip(&self.scale);
        for ((out, x), (shift, scale)) in out.iter_mut().zip(x).zip(factors) {
            *out = (x - shift) * scale;
        }
    }

    /// Weights and bias over standardized features turned into weights over raw ones.
    pub fn to_raw(&self, weights: &[f64], bias: f64) -> (Vec<f64>, f64) {
        let factors = self.shift.iter().zip(&self.scale);
        let raw: Vec<f64> = weights
            .iter()
            .zip(&self.scale)
            .map(|(w, s)| w * s)
            .collect();
        let offset: f64 = raw
            .iter()
            .zip(factors)
            .map(|(w, (shift, _))| w * shift)
            .sum();
        (raw, bias - offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(features: Vec<f64>) -> Rows {
        let labels = vec![0.0; features.len() / 2];
        Rows {
            features,
            labels,
            skipped: 0,
        }
    }

    #[test]
    fn merged_moments_match_one_pass() {
        let all = rows(vec![
            1.0,
            1e6,
            2.0,
            1e6 + 2.0,
            4.0,
            1e6 + 4.0,
            7.0,
            1e6 + 6.0,
        ]);
        let mut merged = Moments::of_rows(&rows(all.features[..2].to_vec()), 2);
        merged.merge(&Moments::default());
        merged.merge(&Moments::of_rows(&rows(all.features[2..].to_vec()), 2));
        let whole = Moments::of_rows(&all, 2);
        let (a, b) = (merged.scaling(2), whole.scaling(2));
        for (x, y) in a
            .shift
            .iter()
            .chain(&a.scale)
            .zip(b.shift.iter().chain(&b.scale))
        {
            assert!((x - y).abs() < 1e-9 * y.abs().max(1.0), "{a:?} vs {b:?}");
        }
        assert_eq!(whole.scaling(2).shift, vec![3.5, 1e6 + 3.0]);
    }

    #[test]
    fn raw_weights_give_the_same_score() {
        let moments = Moments::of_rows(&rows(vec![1.0, 10.0, 3.0, 10.0, 5.0, 10.0]), 2);
        let scaling = moments.scaling(2);
        assert_eq!(scaling.scale[1], 1.0, "constant feature keeps scale 1");
        let (weights, bias) = ([0.5, -2.0], 0.25);
        let x = [4.0, 7.0];
        let mut standardized = [0.0; 2];
        scaling.apply(&x, &mut standardized);
        let score = bias + weights[0] * standardized[0] + weights[1] * standardized[1];
        let (raw, raw_bias) = scaling.to_raw(&weights, bias);
        let raw_score = raw_bias + raw[0] * x[0] + raw[1] * x[1];
        assert!((score - raw_score).abs() < 1e-12);
    }
}
