//! Sampling exactness: with T > 0 every speculative mode must emit exact samples of the
//! (top-k then top-p truncated) target distribution.
//!
//! On a vocabulary of 8 each trial generates [`NEW`] = 6 tokens (token 1 comes from the
//! prefill, tokens 2-6 from speculative rounds of up to 4 drafts, so every draft slot and a
//! second round matter). The reference is exact: the test enumerates every continuation the
//! truncated target allows and computes the marginal of each of the 6 positions and the joint
//! of positions 2 and 3. The truncated distribution at each node is written here from its
//! definition, in f64, from the target's logits ([`reference_dist`]), so a bug shared by the
//! engine's temperature, top-k or top-p code and its samplers cannot cancel out; the engine's
//! own `distribution()` is checked against it at every node.
//!
//! Each Pearson chi-squared test (categories with expected count < 5 pooled) requires
//! p > [`ALPHA`] = 0.001. Power: against ANY alternative at total-variation distance TV,
//! whatever its shape, the noncentrality is at least 4·N·TV² (see
//! `stats::worst_case_noncentrality`), less what pooling hides. With N = 24,000 trials the
//! test asserts power ≥ 0.9 at [`TV`] = 0.02 for every position (df ≤ 7: λ ≥ 38, where 33
//! suffices) and at [`TV_JOINT`] = 0.03 for the joint (df ≤ 63: λ ≥ 86, where 66 suffices).
//! Holding the joint to 0.02 as well took 44,000 trials: 302 s of a 682 s Rust test run on
//! the 2-core development machine (now 174 s), its largest single cost. The drafters are
//! built to accept often, and each case asserts a floor on the mean number of drafts accepted
//! per round.

use dspark_engine::backend::candle::CandleBackend;
use dspark_engine::backend::Backend;
use dspark_engine::drafters::dflash::DFlash;
use dspark_engine::drafters::draft_model::DraftModel;
use dspark_engine::drafters::dspark::DSpark;
use dspark_engine::drafters::{dflash_from_parts, dspark_from_parts};
use dspark_engine::generate::GenParams;
use dspark_engine::model::transformer::{LogitsWanted, Transformer};
use dspark_engine::sampling::{distribution, penalties, SamplingParams};
use dspark_engine::spec::draft_budget::DraftBudget;
use dspark_engine::spec::{decode, Drafter, SpecParams};
use dspark_engine::testing::{
    perturbed, random_dflash, random_dspark, random_target, DrafterSpec, RandomSpec,
};
use dspark_engine::weights::{HostTensor, MemorySource};
use dspark_tests::stats::{chi_squared_pooled, power, worst_case_noncentrality};

const V: usize = 8;
const NEW: usize = 6;
/// The total-variation distance each position's marginal test detects with power ≥ 0.9.
const TV: f64 = 0.02;
/// The same for the joint of positions 2 and 3 (64 categories).
const TV_JOINT: f64 = 0.03;
const ALPHA: f64 = 0.001;
fn trials() -> usize {
    std::env::var("DSPARK_CHI_TRIALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24_000)
}
/// (temperature, top_p, top_k), then min_p and the presence / frequency / repetition
/// penalties: the last configuration exercises every knob at once
#[allow(clippy::type_complexity)]
const CONFIGS: [((f32, f32, usize), (f32, f32, f32, f32)); 5] = [
    ((1.0, 1.0, 0), (0.0, 0.0, 0.0, 1.0)),
    ((1.0, 0.8, 0), (0.0, 0.0, 0.0, 1.0)),
    ((0.7, 1.0, 3), (0.0, 0.0, 0.0, 1.0)),
    ((1.3, 0.9, 5), (0.0, 0.0, 0.0, 1.0)),
    ((1.0, 0.95, 6), (0.05, 0.6, 0.3, 1.4)),
];
const PROMPT: [u32; 4] = [1, 5, 2, 6];

fn spec() -> RandomSpec {
    // a flat-ish head keeps several tokens alive under top-p/top-k truncation
    RandomSpec {
        layer_scale: 0.3,
        head_scale: 1.2,
        ..RandomSpec::tiny(V)
    }
}

/// Pulls every embedding row toward the rows' mean (`spread` 1 leaves them as they are), so
/// the target's next-token distribution depends less on context and drafters that cannot see
/// their own earlier drafts (DFlash, DSpark) still agree with it often.
fn squeeze_embedding(src: &mut MemorySource, spread: f32) {
    let name = "model.embed_tokens.weight";
    let t = &src.tensors[name];
    let shape = t.shape().to_vec();
    let e = t.to_f32().unwrap();
    let h = shape[1];
    let mean: Vec<f32> = (0..h)
        .map(|j| e.chunks_exact(h).map(|r| r[j]).sum::<f32>() / shape[0] as f32)
        .collect();
    let out: Vec<f32> = e
        .chunks_exact(h)
        .flat_map(|r| r.iter().zip(&mean).map(|(x, m)| m + spread * (x - m)))
        .collect();
    src.tensors
        .insert(name.into(), HostTensor::from_f32(shape, &out));
}

/// The sampling distribution from its definition, in f64, for a position preceded by the
/// prompt and `generated`: the logits are penalized (repetition r over the distinct prompt and
/// generated tokens: positive logits divided by r, negative ones multiplied; then
/// `frequency · count + presence · [count > 0]` subtracted over the generated tokens); then
/// softmax(logits / T); min-p drops tokens below `min_p` times the likeliest; top-k keeps the k
/// most likely; top-p then keeps, in descending order of the renormalised probabilities, each
/// token while the mass before it is < top_p; renormalise. The engine works in f32, so where a
/// min-p or top-p comparison falls within 1e-6 the two precisions may round it differently:
/// there (and only there) the token follows `engine`'s decision, and the call is counted in
/// `ambiguous`. Panics on tied logits.
fn reference_dist(
    row: &[f32],
    s: &SamplingParams,
    prompt: &[u32],
    generated: &[u32],
    engine: &[f32],
    ambiguous: &mut usize,
) -> Vec<f64> {
    let mut logits: Vec<f64> = row.iter().map(|&x| x as f64).collect();
    let r = s.repetition_penalty as f64;
    let mut seen = [false; V];
    for &t in prompt.iter().chain(generated) {
        seen[t as usize] = true;
    }
    for (l, _) in logits.iter_mut().zip(seen).filter(|(_, hit)| *hit) {
        *l = if *l > 0.0 { *l / r } else { *l * r };
    }
    for (t, l) in logits.iter_mut().enumerate() {
        let c = generated.iter().filter(|&&g| g as usize == t).count() as f64;
        *l -= s.frequency_penalty as f64 * c
            + if c > 0.0 {
                s.presence_penalty as f64
            } else {
                0.0
            };
    }
    let m = logits.iter().cloned().fold(f64::MIN, f64::max);
    let ex: Vec<f64> = logits
        .iter()
        .map(|&x| ((x - m) / s.temperature as f64).exp())
        .collect();
    let z: f64 = ex.iter().sum();
    let mut order: Vec<usize> = (0..row.len()).collect();
    order.sort_by(|&a, &b| ex[b].total_cmp(&ex[a]));
    for w in order.windows(2) {
        assert!(
            ex[w[0]] > ex[w[1]] * (1.0 + 1e-9),
            "tied logits: pick another seed"
        );
    }
    // `kept` as computed in f64, unless `x` is within rounding of `bound`
    let mut decide = |kept: bool, x: f64, bound: f64, i: usize| {
        if (x - bound).abs() < 1e-6 {
            *ambiguous += 1;
            engine[i] > 0.0
        } else {
            kept
        }
    };
    // min-p: probabilities relative to the likeliest token
    let floor = s.min_p as f64;
    let kept_p: Vec<usize> = order
        .iter()
        .cloned()
        .filter(|&i| {
            let ratio = ex[i] / ex[order[0]];
            floor == 0.0 || decide(ratio >= floor, ratio, floor, i)
        })
        .collect();
    let k = if s.top_k == 0 { row.len() } else { s.top_k };
    let kept_k = &kept_p[..k.min(kept_p.len())];
    let zk: f64 = kept_k.iter().map(|&i| ex[i] / z).sum();
    let mut keep = Vec::new();
    let mut before = 0.0;
    for &i in kept_k {
        let top_p = s.top_p as f64;
        // a token is inside while the mass before it is < top_p
        if s.top_p < 1.0 && !decide(before < top_p, before, top_p, i) {
            break;
        }
        keep.push(i);
        before += ex[i] / z / zk;
    }
    let zz: f64 = keep.iter().map(|&i| ex[i]).sum();
    let mut p = vec![0.0; row.len()];
    for &i in &keep {
        p[i] = ex[i] / zz;
    }
    p
}

/// Exact marginals of the [`NEW`] positions and the joint of positions 2 and 3 (`[b·V + c]`).
struct Exact {
    pos: Vec<Vec<f64>>,
    joint23: Vec<f64>,
    /// nodes where top-p's comparison fell within f32 rounding (see [`reference_dist`])
    ambiguous: usize,
}

fn exact(t: &Transformer<CandleBackend>, s: &SamplingParams, prompt: &[u32]) -> Exact {
    let mut e = Exact {
        pos: vec![vec![0.0; V]; NEW],
        joint23: vec![0.0; V * V],
        ambiguous: 0,
    };
    let mut ids = prompt.to_vec();
    enumerate(t, s, prompt.len(), &mut ids, 1.0, 0, &mut e);
    for (k, m) in e.pos.iter().enumerate() {
        let total: f64 = m.iter().sum();
        assert!((total - 1.0).abs() < 1e-9, "position {k}: mass {total}");
    }
    e
}

fn enumerate(
    t: &Transformer<CandleBackend>,
    s: &SamplingParams,
    prompt_len: usize,
    ids: &mut Vec<u32>,
    prob: f64,
    depth: usize,
    e: &mut Exact,
) {
    let mut cache = t.new_cache();
    let out = t.forward(ids, &mut cache, &[], LogitsWanted::Last).unwrap();
    let row = t
        .backend()
        .to_f32_vec(out.logits.as_ref().unwrap())
        .unwrap();
    let (prompt, generated) = ids.split_at(prompt_len);
    let mut penalized = row.clone();
    penalties::apply(&mut penalized, s, prompt, generated);
    let engine = distribution(&penalized, s);
    let d = reference_dist(&row, s, prompt, generated, &engine, &mut e.ambiguous);
    // the engine's truncation must agree with the definition, support included
    for (i, (&ours, &theirs)) in engine.iter().zip(&d).enumerate() {
        assert!(
            (ours as f64 - theirs).abs() < 1e-6 && (ours > 0.0) == (theirs > 0.0),
            "token {i} after {ids:?}: engine {ours} vs definition {theirs}"
        );
    }
    for (tok, &p) in d.iter().enumerate() {
        if p == 0.0 {
            continue;
        }
        let pp = prob * p;
        e.pos[depth][tok] += pp;
        if depth == 2 {
            e.joint23[*ids.last().unwrap() as usize * V + tok] += pp;
        }
        if depth + 1 < NEW {
            ids.push(tok as u32);
            enumerate(t, s, prompt_len, ids, pp, depth + 1, e);
            ids.pop();
        }
    }
}

/// One chi-squared test with its power bound at total-variation distance `tv`; panics when
/// either fails.
fn assert_fits(what: &str, counts: &[usize], probs: &[f64], tv: f64) {
    let n: usize = counts.iter().sum();
    let (stat, df, p, pooled) = chi_squared_pooled(counts, probs);
    let visible = (tv - pooled).max(0.0);
    let pow = power(df, worst_case_noncentrality(n, visible), ALPHA);
    eprintln!("{what}: chi2 {stat:.2} df {df} p {p:.4} pooled {pooled:.4} power {pow:.3}");
    assert!(p > ALPHA, "{what}: chi2 {stat} df {df} p {p}");
    assert!(pow >= 0.9, "{what}: power {pow} (pooled mass {pooled})");
}

/// Runs every configuration; `floor` is the least mean number of drafts accepted per round.
/// With `budget`, each round's draft count (up to 4) is that budget's choice, carried from
/// trial to trial as the pipeline carries it from request to request.
fn check(
    name: &str,
    t: &Transformer<CandleBackend>,
    d: &mut dyn Drafter<CandleBackend>,
    floor: f64,
    budget: Option<&mut DraftBudget>,
) {
    check_configs(name, t, d, floor, budget, &[0, 1, 2, 3, 4], None);
}

/// [`check`] over the configurations `which` (indices into [`CONFIGS`]) after [`PROMPT`]; with
/// `lookup: Some(prompt)`, after that prompt instead, with prompt lookup after each round's
/// first draft, which must then draft in at least a quarter of the rounds (a 25th with
/// `budget`, which chooses between the lookup's drafts and the drafter's).
fn check_configs(
    name: &str,
    t: &Transformer<CandleBackend>,
    d: &mut dyn Drafter<CandleBackend>,
    floor: f64,
    mut budget: Option<&mut DraftBudget>,
    which: &[usize],
    lookup: Option<&[u32]>,
) {
    let prompt = lookup.unwrap_or(&PROMPT);
    for &ci in which {
        let ((temperature, top_p, top_k), (min_p, presence, frequency, repetition)) = CONFIGS[ci];
        let base = SamplingParams {
            temperature,
            top_p,
            top_k,
            seed: None,
            min_p,
            presence_penalty: presence,
            frequency_penalty: frequency,
            repetition_penalty: repetition,
            ..SamplingParams::default()
        };
        let ex = exact(t, &base, prompt);
        eprintln!(
            "{name} config {ci}: {} min-p/top-p comparisons within f32 rounding",
            ex.ambiguous
        );
        let mut counts = vec![vec![0usize; V]; NEW];
        let mut joint = vec![0usize; V * V];
        let (mut rounds, mut accepted, mut lookup_rounds) = (0usize, 0usize, 0usize);
        for trial in 0..trials() {
            let sampling = SamplingParams {
                seed: Some((ci * 1_000_003 + trial) as u64),
                ..base.clone()
            };
            let params = GenParams {
                max_new_tokens: NEW,
                sampling,
                eos: vec![],
            };
            let spec = SpecParams {
                max_draft: 4,
                confidence_threshold: 0.0,
                lookup: lookup.is_some(),
            };
            d.truncate(0);
            let r = decode::generate_with(
                t,
                &mut t.new_cache(),
                d,
                prompt,
                &params,
                &spec,
                budget.as_deref_mut(),
                &mut Vec::new(),
            )
            .unwrap();
            assert_eq!(r.tokens.len(), NEW);
            for (k, &tok) in r.tokens.iter().enumerate() {
                counts[k][tok as usize] += 1;
            }
            joint[r.tokens[1] as usize * V + r.tokens[2] as usize] += 1;
            lookup_rounds += r.stats.lookup_rounds;
            // a round that reached the cap may have been cut short by max_new_tokens
            for &a in &r.stats.accept_lengths {
                rounds += 1;
                accepted += a - 1;
            }
        }
        let what = format!(
            "{name} T={temperature} top_p={top_p} top_k={top_k} min_p={min_p} penalties={presence}/{frequency}/{repetition}"
        );
        for (k, c) in counts.iter().enumerate() {
            assert_fits(&format!("{what} token {}", k + 1), c, &ex.pos[k], TV);
        }
        assert_fits(
            &format!("{what} tokens 2-3 jointly"),
            &joint,
            &ex.joint23,
            TV_JOINT,
        );
        let mean = accepted as f64 / rounds.max(1) as f64;
        eprintln!(
            "{what}: {mean:.2} drafts accepted per round over {rounds} rounds ({lookup_rounds} with lookup drafts)"
        );
        assert_eq!(
            lookup_rounds > 0,
            lookup.is_some(),
            "{what}: {lookup_rounds} lookup rounds"
        );
        // a measured count keeps the drafter's own drafts where they promise more (here,
        // where the lookup's continuations are the prompt's, not the target's, most rounds)
        let share = if budget.is_some() { 25 } else { 4 };
        assert!(
            lookup_rounds * share >= rounds * usize::from(lookup.is_some()),
            "{what}: lookup drafted in only {lookup_rounds} of {rounds} rounds"
        );
        assert!(
            mean >= floor,
            "{what}: {mean:.2} drafts accepted per round, floor {floor}"
        );
    }
}

/// [`check`] with a draft-count budget; returns its rounds by draft count.
fn check_counted(
    name: &str,
    t: &Transformer<CandleBackend>,
    d: &mut dyn Drafter<CandleBackend>,
    floor: f64,
    mut budget: DraftBudget,
) -> Vec<u64> {
    check(name, t, d, floor, Some(&mut budget));
    let used = budget.rounds_by_count().to_vec();
    eprintln!("{name}: rounds by draft count: {used:?}");
    used
}

/// The draft-model case: the target and a perturbed copy of it drafting with length `len`.
fn draft_model_case(
    len: impl Into<dspark_engine::spec::policy::DraftLen>,
) -> (Transformer<CandleBackend>, DraftModel<CandleBackend>) {
    let s = spec();
    let (_, tsrc) = random_target(&s, 7);
    let t = Transformer::load(&CandleBackend::cpu(), s.config(), &tsrc).unwrap();
    let dm =
        Transformer::load(&CandleBackend::cpu(), s.config(), &perturbed(&tsrc, 0.3, 3)).unwrap();
    (t, DraftModel::new(dm, V, len).unwrap())
}

#[test]
fn draft_model_sampling_is_exact() {
    let (t, mut d) = draft_model_case(4);
    check("draft-model", &t, &mut d, 1.0, None);
}

/// Draft-model mode's default: the cost-aware count, which chooses rounds without drafts where
/// drafting does not pay (the committed token then waits in the draft model's backlog, fed with
/// the next drafting round). Synthetic costs make a plain step the best per token, so that
/// most rounds draft nothing and every eighth explores one draft; the counts, and the test,
/// are reproducible, and the samples must stay exact across that mix. The floor on accepted
/// drafts per round is low accordingly.
#[test]
fn draft_model_sampling_is_exact_with_a_measured_draft_count() {
    let len = dspark_engine::spec::policy::draft_len(dspark_engine::spec::Mode::Draft, None);
    let (t, mut d) = draft_model_case(len);
    fn plain_step_pays(k: usize) -> f64 {
        if k == 0 {
            1.0
        } else {
            2.5 + 0.5 * k as f64
        }
    }
    let budget = DraftBudget::with_synthetic_cost(d.block_len(), plain_step_pays);
    let used = check_counted(
        "draft-model, measured draft count",
        &t,
        &mut d,
        0.03,
        budget,
    );
    assert!(
        used[0] > 100_000 && used[1] > 10_000,
        "plain and drafting rounds should both occur: {used:?}"
    );
}

/// Seeded sampling's default count for DFlash/DSpark: a budget on the CPU's prior round costs
/// (`DraftBudget::with_prior_cost`), whose counts follow acceptance alone. The aligned DSpark
/// drafter is accepted often enough that rounds with drafts and plain steps both occur (most are
/// plain at this prior, so the floor on accepted drafts per round is low); the samples must
/// stay exact across the mix.
#[test]
fn dspark_sampling_is_exact_with_a_prior_draft_count() {
    let (t, mut d) = dspark_case();
    let budget = DraftBudget::with_prior_cost(d.block_len(), 0.35);
    let used = check_counted("dspark, prior draft count", &t, &mut d, 0.03, budget);
    assert!(
        used[0] > 1000 && used[1..].iter().sum::<u64>() > 1000,
        "plain and drafting rounds should both occur: {used:?}"
    );
}

/// The DSpark case: a squeezed target and an aligned block-5 DSpark drafter that accepts often.
fn dspark_case() -> (Transformer<CandleBackend>, DSpark<CandleBackend>) {
    let s = spec();
    let (_, mut tsrc) = random_target(&s, 8);
    squeeze_embedding(&mut tsrc, 0.3);
    let t = Transformer::load(&CandleBackend::cpu(), s.config(), &tsrc).unwrap();
    let ds = DrafterSpec {
        layers: 1,
        block: 5,
        taps: vec![0, 2],
        layer_scale: 0.2,
        mask_token_id: 7,
    };
    let (cfg, dsrc) = random_dspark(&s, &tsrc, &ds, Some(1.0), 8);
    let d = dspark_from_parts(&CandleBackend::cpu(), &cfg, &dsrc, &t).unwrap();
    (t, d)
}

#[test]
fn dspark_sampling_is_exact() {
    let (t, mut d) = dspark_case();
    check("dspark", &t, &mut d, 0.5, None);
}

/// A draft vocabulary of half the ids (0, 2, 5, 7, ranked first): the drafts' distribution is
/// zero on ids 1, 3, 4 and 6, which the target then reaches only through the residual of a
/// rejected draft; every position's marginal and the joint must stay exact. Two of the
/// configurations (plain T = 1, and every processor at once), to bound the suite's time.
#[test]
fn dspark_sampling_is_exact_with_a_draft_vocabulary() {
    use dspark_engine::drafters::draft_vocab::{DraftVocabSize, VocabChoice};
    let (t, d) = dspark_case();
    // the ranked ids alone: a prompt's ids would fill in the other four
    let ranking =
        VocabChoice::ranked(Some(vec![7, 5, 2, 0, 1, 3, 4, 6]), None).with_prompt_ids(false);
    let mut d = d.with_vocab_choice(ranking);
    assert_eq!(
        d.set_draft_vocab(&t, DraftVocabSize::Top(V / 2)).unwrap(),
        Some(V / 2)
    );
    let name = "dspark, draft vocabulary 0 2 5 7";
    check_configs(name, &t, &mut d, 0.3, None, &[0, 4], None);
}

/// Prompt lookup after each round's first draft: a lookup draft's distribution is one-hot, so
/// it is accepted with the target's probability of it and corrected from the target's
/// distribution without it. The prompt holds 23 of the 64 ordered pairs of the 8 ids (the
/// start of a de Bruijn sequence; the whole one made the exact enumeration, which runs every
/// node's forward over the prompt, take 80 s a configuration), so lookup drafts fill many
/// rounds; every position's marginal and the joint must stay exact. Two configurations (plain
/// T = 1, and every processor at once), DSpark and DFlash, and DSpark at a measured count.
#[test]
fn sampling_is_exact_with_prompt_lookup() {
    let pairs = every_pair(V as u32);
    assert_eq!(pairs.len(), V * V + 1);
    let prompt = &pairs[..24];
    let (t, mut d) = dspark_case();
    check_configs(
        "dspark, lookup",
        &t,
        &mut d,
        0.85,
        None,
        &[0, 4],
        Some(prompt),
    );
    let (t, mut d) = dflash_case();
    check_configs(
        "dflash, lookup",
        &t,
        &mut d,
        0.7,
        None,
        &[0, 4],
        Some(prompt),
    );
    // a measured count (prior costs, as seeded requests get), which also chooses after each
    // first draft how many lookup drafts the round takes, or the drafter's own instead
    let (t, mut d) = dspark_case();
    let mut budget = DraftBudget::with_prior_cost(d.block_len(), 0.02);
    check_configs(
        "dspark, lookup, measured count",
        &t,
        &mut d,
        0.85,
        Some(&mut budget),
        &[0],
        Some(prompt),
    );
    eprintln!(
        "dspark, lookup, measured count: rounds by draft count {:?}",
        budget.rounds_by_count()
    );
}

/// A shortest sequence holding every ordered pair of ids `0..k` (a de Bruijn sequence of order
/// 2, made linear by repeating its first id at the end).
fn every_pair(k: u32) -> Vec<u32> {
    let mut seq = Vec::new();
    for a in 0..k {
        // a's necklaces: (a), then (a, b) for every b > a
        seq.push(a);
        for b in a + 1..k {
            seq.extend([a, b]);
        }
    }
    seq.push(seq[0]);
    seq
}

#[test]
fn dflash_sampling_is_exact() {
    let (t, mut d) = dflash_case();
    check("dflash", &t, &mut d, 0.15, None);
}

/// The DFlash case: a squeezed target and a random block-5 DFlash drafter.
fn dflash_case() -> (Transformer<CandleBackend>, DFlash<CandleBackend>) {
    let s = spec();
    let (_, mut tsrc) = random_target(&s, 9);
    squeeze_embedding(&mut tsrc, 0.3);
    let t = Transformer::load(&CandleBackend::cpu(), s.config(), &tsrc).unwrap();
    let ds = DrafterSpec {
        layers: 1,
        block: 5,
        taps: vec![1],
        layer_scale: 0.2,
        mask_token_id: 7,
    };
    let (cfg, dsrc) = random_dflash(&s, &ds, 9);
    let d = dflash_from_parts(&CandleBackend::cpu(), &cfg, &dsrc, &t).unwrap();
    (t, d)
}

/// The cost-aware draft count (DFlash/DSpark's default): each round's count comes from the
/// acceptance of earlier rounds and trials, so it changes from round to round; the samples
/// must stay exact. Round costs are synthetic (each verified draft adds 0.2 of a plain step, so
/// that some rounds verify 1-4 drafts and others none), so the choices, and the test, are
/// reproducible; the floor on accepted drafts counts the plain steps too (0.2: where drafts
/// are accepted least, T = 0.7 with top-k 3, most rounds are plain steps, which come in runs
/// of three, and drafting must promise 5% more than them).
#[test]
fn dspark_sampling_is_exact_with_a_measured_draft_count() {
    let (t, mut d) = dspark_case();
    let budget = DraftBudget::with_synthetic_cost(d.block_len(), |k| 1.0 + 0.2 * k as f64);
    let used = check_counted("dspark, measured draft count", &t, &mut d, 0.2, budget);
    let distinct = used.iter().filter(|&&n| n > 1000).count();
    assert!(
        distinct >= 3 && used[0] > 1000,
        "the draft count should vary: {used:?}"
    );
}
