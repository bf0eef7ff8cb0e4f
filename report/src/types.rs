//! What the analysis produces and the exporters (HTML, PDF, Markdown, JSON) consume.

use inabench_core::Manifest;
use inabench_core::claims::Verdict;
use inabench_core::spec::{Fidelity, Spec};
use inabench_core::value::Params;
use serde::Serialize;

/// One system's metric at one point, over its repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct AggRow {
    pub system: String,
    pub fidelity: Fidelity,
    pub fabric: String,
    pub params: Params,
    pub metric: String,
    pub unit: String,
    pub n: usize,
    pub median: f64,
    pub mean: f64,
    pub min: f64,
    pub max: f64,
    /// 95% confidence interval of the mean (Student's t); equal to the mean when n < 2.
    pub ci_lo: f64,
    pub ci_hi: f64,
    /// The value of every repetition, in repetition order (what statistical verdicts resample).
    #[serde(default)]
    pub reps: Vec<f64>,
}

/// A paper value beside ours.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub system: String,
    pub metric: String,
    pub unit: String,
    pub params: Params,
    pub paper: f64,
    /// Ours in one fidelity class at one setting of the parameters that vary among the points
    /// matching the paper's value (those settings are in `params`).
    pub ours: Option<f64>,
    pub fidelity: Option<Fidelity>,
    /// (ours - paper) / |paper|; none when the class does not measure at the paper's scale
    pub deviation: Option<f64>,
    pub note: Option<String>,
    /// Why this class's value is not at the paper's scale (the metric's `not_comparable`): the
    /// report shows no deviation and says why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_comparable: Option<String>,
}

/// A claim's verdict in one fidelity class.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct ClaimResult {
    pub id: String,
    pub text: String,
    pub expr: String,
    pub fidelity: Fidelity,
    /// holds | fails | inconclusive | not checkable here
    pub verdict: String,
    pub detail: String,
    /// Set for a consistency check (arithmetic on the paper's inputs, or true by construction
    /// of the model): why. Reports show these apart from evidence.
    #[serde(default)]
    pub consistency: Option<String>,
    /// The spec's explanation of a finding (shown beside the numbers; never changes a verdict).
    #[serde(default)]
    pub finding: Option<String>,
    /// Where the verdict flips along the host profile input the claim rests on (`rests_on:`),
    /// solved by the harness after the run (`breakeven.json`); a break-even inside the input's
    /// band makes the verdict `host-dependent`.
    #[serde(default)]
    pub breakeven: Option<BreakEven>,
}

/// The file in a run folder that holds the break-evens the harness solved.
pub const BREAKEVEN_FILE: &str = "breakeven.json";

/// One claim's break-even in one class: the host profile input, its value, band and where the
/// verdict flips along it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BreakEven {
    pub claim: String,
    pub fidelity: Fidelity,
    /// The profile key (`systems.atp.worker.frame`).
    pub key: String,
    pub unit: String,
    /// The profile's value.
    pub value: f64,
    pub band: Option<[f64; 2]>,
    /// The input values where the verdict flips, ascending.
    pub flips: Vec<f64>,
    /// `host-dependent`, `does not test the input`, ...
    pub status: String,
    /// The sentence reports print beside the verdict.
    pub sentence: String,
}

impl ClaimResult {
    /// A claim's verdict in one class, with its consistency and finding notes.
    pub fn of(c: &inabench_core::spec::Claim, fidelity: Fidelity, v: &Verdict) -> Self {
        let mut r = ClaimResult::new(&c.id, &c.text, &c.expr, fidelity, v);
        r.consistency.clone_from(&c.consistency);
        r.finding.clone_from(&c.finding);
        r
    }

    /// Evidence, not a consistency check.
    pub fn is_evidence(&self) -> bool {
        self.consistency.is_none()
    }

    pub fn new(id: &str, text: &str, expr: &str, fidelity: Fidelity, v: &Verdict) -> Self {
        ClaimResult {
            id: id.to_string(),
            text: text.to_string(),
            expr: expr.to_string(),
            fidelity,
            verdict: v.label().to_string(),
            detail: v.detail().to_string(),
            consistency: None,
            finding: None,
            breakeven: None,
        }
    }

    /// The verdict with its break-even beside it: the sentence in the detail, and
    /// `host-dependent` where the break-even lies inside the input's band.
    /// The claim with one of its break-evens (a claim resting on several inputs gets one per
    /// input, applied in turn: any inside its band makes it host-dependent, and that one is kept
    /// as `breakeven`, else the first).
    pub fn with_breakeven(mut self, b: &BreakEven) -> Self {
        let dependent = b.status == "host-dependent";
        if dependent && self.verdict != "host-dependent" {
            self.detail = format!("{} (was {}: {})", b.sentence, self.verdict, self.detail);
            self.verdict = "host-dependent".into();
        } else {
            self.detail = format!("{}; {}", self.detail, b.sentence);
        }
        let replace = match &self.breakeven {
            None => true,
            Some(old) => dependent && old.status != "host-dependent",
        };
        if replace {
            self.breakeven = Some(b.clone());
        }
        self
    }
}

/// Everything a report shows.
#[derive(Debug, Clone, Serialize)]
pub struct Analysis {
    pub manifest: Manifest,
    pub spec: Spec,
    pub rows_total: usize,
    pub agg: Vec<AggRow>,
    pub comparisons: Vec<Comparison>,
    pub claims: Vec<ClaimResult>,
    /// The fidelity classes present in the results.
    pub fidelities: Vec<Fidelity>,
}
