//! Searching by a rule over several example vectors: the reference's `best_score` and
//! `sum_scores` recommend strategies, discovery (a target and context pairs) and context
//! (pairs only).
//!
//! Owns: the rules (how per-example similarities combine into one score, larger better)
//! and `search_rule`, which walks the same graph as `search` with a scorer that computes
//! every example's similarity to a slot and combines them (starting from near each
//! example that marks a good region as well as where the rule's own descent ends), falls back to the exact scan
//! where `search` does (flat index, `exact`, a small filter, a filter the graph cannot
//! cover), and on a quantized index traverses on codes and rescores on the originals.
//! Must never: allocate per visited node (the rule folds similarities as it reads them),
//! or return a deleted slot.
//!
//! A similarity is the negated cost the index already computes: the dot product for Dot
//! and Cosine (on normalised vectors), the negated squared distance for Euclid and the
//! negated L1 distance for Manhattan, as the reference's metrics define similarity.
//! The rule's score is returned as it is (the reference does not post-process the
//! scores of these queries as it does a nearest-neighbour distance).

use std::collections::BinaryHeap;

use super::search::{BqScorer, RawScorer, Scorer, SqScorer};
use super::*;

/// `x / (1 + |x|)`: a sigmoid without the exponent, in (-1, 1).
#[inline(always)]
pub fn fast_sigmoid(x: f32) -> f32 {
    x / (1.0 + x.abs())
}

/// `fast_sigmoid` moved to (0, 1).
#[inline(always)]
pub fn scaled_fast_sigmoid(x: f32) -> f32 {
    0.5 * (fast_sigmoid(x) + 1.0)
}

/// How the similarities to the examples make one score. The examples come in one list:
/// - `BestScore`, `SumScores`: the first `positives` examples are positive, the rest
///   negative;
/// - `Discover`: the target, then each context pair as (positive, negative);
/// - `Context`: each pair as (positive, negative).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Best positive similarity p and best negative n (-inf when there is none):
    /// `sigmoid(p)` when p > n, else `-sigmoid(n)`, with the scaled fast sigmoid.
    BestScore,
    /// Sum of the positive similarities minus the sum of the negative ones.
    SumScores,
    /// Per pair +1, 0 or -1 as the positive similarity is above, equal to or below the
    /// negative one, summed, plus the scaled fast sigmoid of the target similarity.
    Discover,
    /// Per pair `fast_sigmoid(min(pos - neg - f32::EPSILON, 0))`, summed (0 is best).
    Context,
}

impl Rule {
    pub fn code(self) -> u32 {
        match self {
            Rule::BestScore => 0,
            Rule::SumScores => 1,
            Rule::Discover => 2,
            Rule::Context => 3,
        }
    }

    pub fn from_code(c: u32) -> Option<Rule> {
        match c {
            0 => Some(Rule::BestScore),
            1 => Some(Rule::SumScores),
            2 => Some(Rule::Discover),
            3 => Some(Rule::Context),
            _ => None,
        }
    }

    pub fn parse(name: &str) -> Option<Rule> {
        match name {
            "best_score" => Some(Rule::BestScore),
            "sum_scores" => Some(Rule::SumScores),
            "discover" => Some(Rule::Discover),
            "context" => Some(Rule::Context),
            _ => None,
        }
    }

    /// Whether `examples` examples with `positives` positives fit this rule.
    pub fn check(self, examples: usize, positives: usize) -> Result<()> {
        let ok = match self {
            Rule::BestScore | Rule::SumScores => examples >= 1 && positives <= examples,
            Rule::Discover => examples % 2 == 1 && positives == 0,
            Rule::Context => examples >= 2 && examples % 2 == 0 && positives == 0,
        };
        if ok {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "{:?} cannot take {} examples with {} positives (recommend rules: at least one example; discover: a target and pairs; context: at least one pair)",
                self, examples, positives
            )))
        }
    }

    /// Whether example `j` marks a region good results lie in (a positive, the target, a
    /// pair's positive side): the walk starts from near each of them as well.
    pub fn seeds_from(self, j: usize, positives: usize) -> bool {
        match self {
            Rule::BestScore | Rule::SumScores => j < positives,
            Rule::Discover => j == 0 || j % 2 == 1,
            Rule::Context => j % 2 == 0,
        }
    }

    /// The score of a candidate whose similarity to example `j` is `sim(j)`.
    #[inline(always)]
    pub fn score<F: FnMut(usize) -> f32>(self, examples: usize, positives: usize, mut sim: F) -> f32 {
        match self {
            Rule::BestScore => {
                let mut best_pos = f32::NEG_INFINITY;
                let mut best_neg = f32::NEG_INFINITY;
                for j in 0..examples {
                    let s = sim(j);
                    let best = if j < positives { &mut best_pos } else { &mut best_neg };
                    if s.total_cmp(best).is_gt() {
                        *best = s;
                    }
                }
                if best_pos > best_neg {
                    scaled_fast_sigmoid(best_pos)
                } else {
                    -scaled_fast_sigmoid(best_neg)
                }
            }
            Rule::SumScores => {
                let mut pos = 0.0f32;
                let mut neg = 0.0f32;
                for j in 0..examples {
                    if j < positives {
                        pos += sim(j);
                    } else {
                        neg += sim(j);
                    }
                }
                pos - neg
            }
            Rule::Discover => {
                let mut rank = 0i32;
                let mut j = 1;
                while j + 1 < examples {
                    rank += sim(j).total_cmp(&sim(j + 1)) as i32;
                    j += 2;
                }
                rank as f32 + scaled_fast_sigmoid(sim(0))
            }
            Rule::Context => {
                let mut total = 0.0f32;
                let mut j = 0;
                while j + 1 < examples {
                    let diff = sim(j) - sim(j + 1) - f32::EPSILON;
                    total += fast_sigmoid(diff.min(0.0));
                    j += 2;
                }
                total
            }
        }
    }
}

/// A rule over one scorer per example; its cost is the negated rule score.
struct RuleScorer<S: Scorer> {
    rule: Rule,
    positives: usize,
    parts: Vec<S>,
}

impl<S: Scorer> Scorer for RuleScorer<S> {
    #[inline(always)]
    fn cost(&self, i: u32) -> f32 {
        let parts = &self.parts;
        -self.rule.score(parts.len(), self.positives, |j| -parts[j].cost(i))
    }
}

impl Index {
    /// The graph walk of a rule: a score over several examples can peak in several
    /// places (near each positive of best_score, say) where one greedy descent finds one,
    /// so level 0 starts from the descent by the rule and from a descent towards each
    /// example that marks a good region, together.
    fn graph_search_rule<S: Scorer>(&self, scorer: &RuleScorer<S>, ef: usize, allow: Option<&[u64]>) -> Vec<Cand> {
        let mut eps = match self.descend(scorer) {
            None => return Vec::new(),
            Some(e) => vec![e],
        };
        for (j, part) in scorer.parts.iter().enumerate() {
            if !scorer.rule.seeds_from(j, scorer.positives) {
                continue;
            }
            if let Some(e) = self.descend(part) {
                if !eps.contains(&e) {
                    eps.push(e);
                }
            }
        }
        self.search_level0(scorer, &eps, ef, allow)
    }

    /// Every allowed slot (or every live one) scored by `scorer`, the `k` best first.
    fn exact_scan_by<S: Scorer>(&self, scorer: &S, k: usize, allow: Option<&[u64]>) -> Vec<Cand> {
        let mut top: BinaryHeap<Cand> = BinaryHeap::with_capacity(k + 1);
        let mut consider = |i: u32| {
            let d = scorer.cost(i);
            if top.len() < k {
                top.push(Cand { cost: d, id: i });
            } else if d < top.peek().map(|x| x.cost).unwrap_or(f32::INFINITY) {
                top.pop();
                top.push(Cand { cost: d, id: i });
            }
        };
        match allow {
            Some(bits) => {
                for (w, word) in bits.iter().enumerate() {
                    let mut b = *word;
                    while b != 0 {
                        consider((w as u32) * 64 + b.trailing_zeros());
                        b &= b - 1;
                    }
                }
            }
            None => {
                for i in 0..self.n as u32 {
                    if !self.is_deleted(i) {
                        consider(i);
                    }
                }
            }
        }
        top.into_sorted_vec()
    }

    /// The `params.k` best live slots by `rule` over `examples` (flat, a multiple of the
    /// dimension; see `Rule` for their order), best first, with the rule's score.
    /// `allow` restricts results to those labels. Parameters mean what they mean for
    /// `search`: `ef` sizes the beam, `exact` scans, a quantized index walks on codes,
    /// keeps the candidates `rescore_depth` gives and rescores them on the originals.
    pub fn search_rule(
        &self,
        rule: Rule,
        positives: usize,
        examples: &[f32],
        params: &SearchParams,
        allow: Option<&[u64]>,
    ) -> Result<Vec<(u64, f32)>> {
        let d = self.config.dim;
        if examples.is_empty() || examples.len() % d != 0 {
            return Err(Error::new(
                crate::error::ErrorKind::DimensionMismatch,
                format!("{} example values are not a non-zero multiple of dimension {}", examples.len(), d),
            ));
        }
        let count = examples.len() / d;
        rule.check(count, positives)?;
        if examples.iter().any(|x| !x.is_finite()) {
            return Err(Error::invalid("an example has a non-finite value"));
        }
        if params.k == 0 {
            return Err(Error::invalid("k must be at least 1"));
        }
        if let Some(o) = params.oversampling {
            if !(o.is_finite() && o >= 1.0) {
                return Err(Error::invalid(format!("oversampling must be >= 1, got {}", o)));
            }
        }
        // Each example is scored as the stored type would hold it, as a query is.
        let prepared: Vec<Vec<f32>> = examples
            .chunks(d)
            .map(|e| {
                let mut q = e.to_vec();
                self.config.datatype.prepare(self.config.distance, &mut q);
                q
            })
            .collect();
        let k = params.k.min(self.len().max(1));

        let mut allow_bits: Option<Vec<u64>> = None;
        let mut allowed = 0usize;
        if let Some(ls) = allow {
            let mut bits = vec![0u64; (self.n + 63) / 64];
            for l in ls {
                if let Some(&i) = self.label_map.get(l) {
                    let w = &mut bits[(i >> 6) as usize];
                    let b = 1u64 << (i & 63);
                    if *w & b == 0 {
                        *w |= b;
                        allowed += 1;
                    }
                }
            }
            allow_bits = Some(bits);
        }
        let bits = allow_bits.as_deref();
        let raw = RuleScorer {
            rule,
            positives,
            parts: prepared.iter().map(|q| RawScorer { index: self, q }).collect(),
        };
        let small_filter = allow.is_some() && allowed * d * 4 <= self.config.full_scan_threshold_kb * 1024;
        let found = if self.config.flat || params.exact || small_filter || allowed == self.len() && allow.is_some() && allowed <= k {
            self.exact_scan_by(&raw, k, bits)
        } else {
            let ef = params.ef.unwrap_or(self.config.ef_construct).max(k).min(self.n.max(1));
            let mut res = if self.quantized() && !params.ignore_quantization {
                let (keep, ef) = super::rescore_depth(k, ef, params.oversampling, self.n);
                let mut cands = match &self.codes {
                    Codes::Scalar(sq) => {
                        let parts = prepared.iter().map(|q| SqScorer { index: self, sq, q: sq.prepare_query(self.config.distance, q) }).collect();
                        self.graph_search_rule(&RuleScorer { rule, positives, parts }, ef, bits)
                    }
                    Codes::Binary(bq) => {
                        let parts = prepared.iter().map(|q| BqScorer { index: self, bq, q: bq.prepare_query(self.config.distance, q) }).collect();
                        self.graph_search_rule(&RuleScorer { rule, positives, parts }, ef, bits)
                    }
                    Codes::F32 => unreachable!(),
                };
                cands.truncate(keep);
                if params.rescore {
                    for c in cands.iter_mut() {
                        c.cost = raw.cost(c.id);
                    }
                    cands.sort_unstable();
                }
                cands
            } else {
                self.graph_search_rule(&raw, ef, bits)
            };
            // As in `search`: a strict filter can cut the graph; scan what it allows.
            if allow.is_some() && res.len() < k && allowed > res.len() {
                res = self.exact_scan_by(&raw, k, bits);
            }
            res
        };
        Ok(found.iter().take(k).map(|c| (self.labels[c.id as usize], -c.cost)).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hnsw::tests::gaussian;

    // The rules as the reference documents them (qdrant.tech/documentation/concepts/explore/:
    // "Best score strategy", "Sum scores strategy", "Discovery search", "Context search"),
    // written out plainly here so the engine's folding is checked against them.
    fn sigmoid01(x: f32) -> f32 {
        0.5 * (x / (1.0 + x.abs()) + 1.0)
    }

    fn by_hand(rule: Rule, positives: usize, sims: &[f32]) -> f32 {
        match rule {
            Rule::BestScore => {
                let p = sims[..positives].iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                let n = sims[positives..].iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                if p > n {
                    sigmoid01(p)
                } else {
                    -sigmoid01(n)
                }
            }
            Rule::SumScores => sims[..positives].iter().sum::<f32>() - sims[positives..].iter().sum::<f32>(),
            Rule::Discover => {
                let mut rank = 0.0;
                for pair in sims[1..].chunks(2) {
                    rank += if pair[0] > pair[1] {
                        1.0
                    } else if pair[0] < pair[1] {
                        -1.0
                    } else {
                        0.0
                    };
                }
                rank + sigmoid01(sims[0])
            }
            Rule::Context => sims
                .chunks(2)
                .map(|p| {
                    let x = (p[0] - p[1] - f32::EPSILON).min(0.0);
                    x / (1.0 + x.abs())
                })
                .sum(),
        }
    }

    fn similarity(dist: Distance, a: &[f32], b: &[f32]) -> f32 {
        match dist {
            Distance::Dot => a.iter().zip(b).map(|(x, y)| x * y).sum(),
            Distance::Cosine => {
                let na = a.iter().map(|x| x * x).sum::<f32>().sqrt();
                let nb = b.iter().map(|x| x * x).sum::<f32>().sqrt();
                a.iter().zip(b).map(|(x, y)| x * y).sum::<f32>() / (na * nb)
            }
            Distance::Euclid => -a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum::<f32>(),
            Distance::Manhattan => -a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f32>(),
        }
    }

    /// Every allowed label with its score by hand, best first (ties by label).
    fn truth(dist: Distance, data: &[f32], d: usize, rule: Rule, positives: usize, ex: &[f32], allow: Option<&[u64]>) -> Vec<(u64, f32)> {
        let mut all: Vec<(u64, f32)> = (0..data.len() / d)
            .filter(|&i| allow.map_or(true, |a| a.contains(&(i as u64))))
            .map(|i| {
                let v = &data[i * d..(i + 1) * d];
                let sims: Vec<f32> = ex.chunks(d).map(|e| similarity(dist, e, v)).collect();
                (i as u64, by_hand(rule, positives, &sims))
            })
            .collect();
        all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        all
    }

    #[test]
    fn rules_fold_as_documented() {
        let cases: Vec<(Rule, usize, Vec<f32>)> = vec![
            (Rule::BestScore, 1, vec![42.0, 4.0]),
            (Rule::BestScore, 1, vec![4.0, 42.0]),
            (Rule::BestScore, 0, vec![-3.0, 0.5]),
            (Rule::BestScore, 2, vec![-1.0, -0.5]),
            (Rule::SumScores, 2, vec![0.5, 0.25, 1.0]),
            (Rule::Discover, 0, vec![0.3, 10.0, 4.0, 4.0, 10.0, 2.0, 2.0]),
            (Rule::Context, 0, vec![1.0, 0.0, 0.0, 2.0, 0.7, 0.7]),
        ];
        for (rule, pos, sims) in cases {
            let got = rule.score(sims.len(), pos, |j| sims[j]);
            assert_eq!(got, by_hand(rule, pos, &sims), "{:?} {:?}", rule, sims);
        }
        assert_eq!(Rule::BestScore.score(2, 1, |j| [4.0, 42.0][j]), -sigmoid01(42.0));
        assert_eq!(Rule::Discover.score(5, 0, |j| [0.0, 10.0, 4.0, 4.0, 10.0][j]), 0.5);
        assert!(Rule::Context.check(3, 0).is_err() && Rule::Discover.check(2, 0).is_err() && Rule::SumScores.check(0, 0).is_err());
    }

    #[test]
    fn graph_search_by_rule_finds_the_exact_best() {
        let d = 16;
        let n = 3000;
        let data = gaussian(n, d, 41);
        let labels: Vec<u64> = (0..n as u64).collect();
        let k = 10;
        for dist in [Distance::Cosine, Distance::Dot, Distance::Euclid] {
            for quant in [Quantization::None, Quantization::Scalar { quantile: 0.99 }] {
                let mut cfg = IndexConfig::new(d, dist);
                cfg.quantization = quant;
                let mut idx = Index::new(cfg).unwrap();
                idx.add(&labels, &data, 2).unwrap();
                let mut hits = 0usize;
                let mut asked = 0usize;
                for (qi, (rule, count, pos)) in [(Rule::BestScore, 3, 2), (Rule::SumScores, 3, 2), (Rule::Discover, 5, 0), (Rule::Context, 4, 0)].iter().cloned().enumerate() {
                    for rep in 0..5u64 {
                        // Examples near stored points, as ids used as examples are.
                        let mut ex = gaussian(count, d, 100 + qi as u64 * 10 + rep);
                        for (j, e) in ex.chunks_mut(d).enumerate() {
                            let p = ((rep * 131 + j as u64 * 977 + qi as u64 * 17) % n as u64) as usize;
                            for t in 0..d {
                                e[t] = data[p * d + t] + 0.3 * e[t];
                            }
                        }
                        let want = truth(dist, &data, d, rule, pos, &ex, None);
                        // Exact mode: the rule applied to every point.
                        let mut p = SearchParams::new(k);
                        p.exact = true;
                        let got = idx.search_rule(rule, pos, &ex, &p, None).unwrap();
                        assert_eq!(got.len(), k);
                        for (g, w) in got.iter().zip(&want) {
                            let own = want.iter().find(|x| x.0 == g.0).unwrap().1;
                            assert!((g.1 - own).abs() <= 1e-3 * (1.0 + own.abs()), "{:?} {:?} score of {} {} vs {}", dist, rule, g.0, g.1, own);
                            assert!((g.1 - w.1).abs() <= 1e-3 * (1.0 + w.1.abs()), "{:?} {:?} exact {:?} vs {:?}", dist, rule, got, &want[..k]);
                        }
                        // Graph: a hit is a result scoring at least the k-th best (rules
                        // with plateaus, as context has, tie many points).
                        let mut p = SearchParams::new(k);
                        p.ef = Some(128);
                        p.oversampling = Some(2.0);
                        let got = idx.search_rule(rule, pos, &ex, &p, None).unwrap();
                        let kth = want[k - 1].1;
                        hits += got.iter().filter(|g| g.1 >= kth - 1e-3 * (1.0 + kth.abs())).count();
                        asked += k;
                        // Filtered: only allowed labels, and the scan when small.
                        let allow: Vec<u64> = labels.iter().cloned().filter(|l| l % 41 == 0).collect();
                        let got = idx.search_rule(rule, pos, &ex, &SearchParams::new(k), Some(&allow)).unwrap();
                        let want = truth(dist, &data, d, rule, pos, &ex, Some(&allow));
                        assert!(got.iter().all(|g| g.0 % 41 == 0));
                        assert!((got[0].1 - want[0].1).abs() <= 1e-3 * (1.0 + want[0].1.abs()));
                    }
                }
                let recall = hits as f64 / asked as f64;
                assert!(recall >= 0.9, "{:?} {:?} recall {}", dist, quant, recall);
            }
        }
    }

    #[test]
    fn bad_examples_are_refused() {
        let mut idx = Index::new(IndexConfig::new(4, Distance::Dot)).unwrap();
        idx.add(&[1, 2], &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], 1).unwrap();
        let p = SearchParams::new(1);
        assert_eq!(idx.search_rule(Rule::BestScore, 1, &[1.0, 2.0, 3.0], &p, None).unwrap_err().code(), "QUIVER_DIMENSION_MISMATCH");
        assert_eq!(idx.search_rule(Rule::Context, 0, &[1.0; 4], &p, None).unwrap_err().code(), "QUIVER_INVALID_ARGUMENT");
        assert_eq!(idx.search_rule(Rule::SumScores, 1, &[f32::NAN, 0.0, 0.0, 0.0], &p, None).unwrap_err().code(), "QUIVER_INVALID_ARGUMENT");
        let got = idx.search_rule(Rule::BestScore, 1, &[1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0], &SearchParams::new(5), None).unwrap();
        assert_eq!(got, vec![(1, sigmoid01(1.0)), (2, -sigmoid01(1.0))]);
    }
}
