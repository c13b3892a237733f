//! The static plan: compiled once from a [`GraphBuilder`], never changed while frames run.
//!
//! What the plan fixes:
//!
//! - **Order**: stages are renumbered in a topological order (Kahn's algorithm, ties broken
//!   by declaration order, so the same graph always gets the same numbering). Stage `i` of
//!   the plan is at position `i`.
//! - **Lanes**: a list-scheduling pass over that order, using each stage's budget as its
//!   cost estimate, puts every stage on the lane where it could start earliest (ties: the
//!   lane of its latest-finishing predecessor, then the lowest lane). Fan-out siblings land
//!   on different lanes; chains stay on one lane. A stage pinned with `.lane(i)` keeps lane
//!   `i % lanes`. Lane assignment never changes outputs, only timing.
//! - **Buffers**: one per written buffer name, aligned to at least 64 bytes (a cache line,
//!   so parallel stages never false-share), placed in one frame slot by the arena planner.
//!   Two buffers may share bytes only if every access to one *happens before* the write of
//!   the other in the dependency graph. Plain position-in-order liveness is not enough here:
//!   stages on different lanes run at the same time, so the planner's conflict relation is
//!   the graph's happens-before relation, not interval overlap. Published buffers are read
//!   after the last stage, so they never share bytes with anything written after them.
//!
//! Cost: O(stages² + buffers²) at start-up. The plan owns the stage objects until the
//! runtime takes them.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use crate::arena::{plan_with_conflicts, ArenaLayout, BufferRequest};
use crate::graph::{GraphBuilder, PlanError, PortDecl, MAX_STAGES};
use crate::stage::{Criticality, ElemType, Fallback, PortView, Stage};

/// Plan-level settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PlanConfig {
    /// Worker lanes (threads), at least 1.
    pub lanes: usize,
    /// Frame slots = most frames in flight, at least 1.
    pub frame_slots: usize,
}

impl Default for PlanConfig {
    fn default() -> Self {
        PlanConfig {
            lanes: 2,
            frame_slots: 2,
        }
    }
}

/// One stage as planned.
#[derive(Clone, Debug, Serialize)]
pub struct StagePlan {
    /// Name.
    pub name: String,
    /// Budget, ns (0 = unchecked).
    pub budget_ns: u64,
    /// Criticality.
    pub criticality: Criticality,
    /// Lane it runs on.
    pub lane: usize,
    /// Buffers it reads (plan buffer indices), in port order.
    pub input_buffers: Vec<usize>,
    /// Buffers it writes, in port order.
    pub output_buffers: Vec<usize>,
    /// Stages that read one of its outputs.
    pub successors: Vec<usize>,
    /// Stages whose outputs it reads.
    pub predecessors: Vec<usize>,
    #[serde(skip)]
    pub(crate) inputs: Vec<PortView>,
    #[serde(skip)]
    pub(crate) outputs: Vec<PortView>,
}

/// One buffer as planned.
#[derive(Clone, Debug, Serialize)]
pub struct BufferPlan {
    /// Name.
    pub name: String,
    /// Element type name.
    pub elem: &'static str,
    #[serde(skip)]
    pub(crate) elem_type: ElemType,
    /// Elements.
    pub len: usize,
    /// Bytes.
    pub bytes: usize,
    /// Offset inside a frame slot.
    pub offset: usize,
    /// Writer stage.
    pub producer: usize,
    /// Reader stages.
    pub consumers: Vec<usize>,
    /// Handed to the publisher.
    pub published: bool,
}

/// A stage and its fallback, as handed to the runtime.
pub(crate) type StageObjects = (Box<dyn Stage>, Box<dyn Fallback>);

/// The compiled, immutable plan.
pub struct Plan {
    pub(crate) stages: Vec<StagePlan>,
    pub(crate) buffers: Vec<BufferPlan>,
    pub(crate) published: Vec<usize>,
    pub(crate) layout: ArenaLayout,
    pub(crate) config: PlanConfig,
    /// Stage objects, taken by the runtime at start.
    pub(crate) objects: Vec<Option<StageObjects>>,
}

impl std::fmt::Debug for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plan")
            .field("stages", &self.stages)
            .field("buffers", &self.buffers)
            .field("layout", &self.layout)
            .finish()
    }
}

impl Plan {
    pub(crate) fn compile(g: GraphBuilder, config: &PlanConfig) -> Result<Plan, PlanError> {
        if config.lanes == 0 || config.lanes > 64 {
            return Err(PlanError::Config(format!(
                "lanes = {}: use 1 to 64 lanes",
                config.lanes
            )));
        }
        if config.frame_slots == 0 || config.frame_slots > 16 {
            return Err(PlanError::Config(format!(
                "frame_slots = {}: use 1 to 16 frames in flight",
                config.frame_slots
            )));
        }
        let n = g.stages.len();
        if n == 0 {
            return Err(PlanError::Empty);
        }
        if n > MAX_STAGES {
            return Err(PlanError::TooManyStages { count: n });
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (i, s) in g.stages.iter().enumerate() {
            if names.insert(s.name.as_str(), i).is_some() {
                return Err(PlanError::DuplicateStage {
                    name: s.name.clone(),
                });
            }
            if s.outputs.len() > 64 {
                return Err(PlanError::TooManyOutputs {
                    stage: s.name.clone(),
                    count: s.outputs.len(),
                });
            }
            for p in s.inputs.iter().chain(&s.outputs) {
                if p.len == 0 {
                    return Err(PlanError::EmptyBuffer {
                        stage: s.name.clone(),
                        buffer: p.buffer.clone(),
                    });
                }
            }
        }

        // Producers, by buffer name (declaration indices).
        let mut producer: BTreeMap<&str, (usize, &PortDecl)> = BTreeMap::new();
        for (i, s) in g.stages.iter().enumerate() {
            for p in &s.outputs {
                if let Some((first, _)) = producer.insert(p.buffer.as_str(), (i, p)) {
                    return Err(PlanError::TwoProducers {
                        buffer: p.buffer.clone(),
                        first: g.stages[first].name.clone(),
                        second: s.name.clone(),
                    });
                }
            }
        }
        // Edges, checked for producers and types.
        let mut preds: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, s) in g.stages.iter().enumerate() {
            for p in &s.inputs {
                let Some(&(w, wp)) = producer.get(p.buffer.as_str()) else {
                    return Err(PlanError::NoProducer {
                        stage: s.name.clone(),
                        buffer: p.buffer.clone(),
                    });
                };
                if wp.elem.id != p.elem.id || wp.len != p.len {
                    return Err(PlanError::TypeMismatch {
                        buffer: p.buffer.clone(),
                        writer: g.stages[w].name.clone(),
                        writer_type: wp.elem.name,
                        writer_len: wp.len,
                        reader: s.name.clone(),
                        reader_type: p.elem.name,
                        reader_len: p.len,
                    });
                }
                if !preds[i].contains(&w) {
                    preds[i].push(w);
                }
            }
        }
        for b in &g.published {
            if !producer.contains_key(b.as_str()) {
                return Err(PlanError::UnknownPublished { buffer: b.clone() });
            }
        }

        let order = topological_order(&preds).map_err(|cycle| PlanError::Cycle {
            path: cycle
                .iter()
                .map(|&i| g.stages[i].name.as_str())
                .collect::<Vec<_>>()
                .join(" -> "),
        })?;
        // pos[declaration index] = plan index.
        let mut pos = vec![0usize; n];
        for (p, &d) in order.iter().enumerate() {
            pos[d] = p;
        }

        // Buffers, numbered by (producer position, port order).
        let mut buffers: Vec<BufferPlan> = Vec::new();
        let mut buffer_index: HashMap<String, usize> = HashMap::new();
        for &d in &order {
            for p in &g.stages[d].outputs {
                buffer_index.insert(p.buffer.clone(), buffers.len());
                buffers.push(BufferPlan {
                    name: p.buffer.clone(),
                    elem: p.elem.name,
                    elem_type: p.elem,
                    len: p.len,
                    bytes: p.len * p.elem.size,
                    offset: 0,
                    producer: pos[d],
                    consumers: Vec::new(),
                    published: g.published.contains(&p.buffer),
                });
            }
        }

        let mut stages: Vec<StagePlan> = Vec::with_capacity(n);
        for &d in &order {
            let s = &g.stages[d];
            let input_buffers: Vec<usize> =
                s.inputs.iter().map(|p| buffer_index[&p.buffer]).collect();
            let output_buffers: Vec<usize> =
                s.outputs.iter().map(|p| buffer_index[&p.buffer]).collect();
            let mut predecessors: Vec<usize> = preds[d].iter().map(|&w| pos[w]).collect();
            predecessors.sort_unstable();
            stages.push(StagePlan {
                name: s.name.clone(),
                budget_ns: s.budget_ns,
                criticality: s.criticality,
                lane: 0,
                input_buffers,
                output_buffers,
                successors: Vec::new(),
                predecessors,
                inputs: Vec::new(),
                outputs: Vec::new(),
            });
        }
        for i in 0..n {
            for k in 0..stages[i].predecessors.len() {
                let p = stages[i].predecessors[k];
                stages[p].successors.push(i);
            }
            for k in 0..stages[i].input_buffers.len() {
                let b = stages[i].input_buffers[k];
                if !buffers[b].consumers.contains(&i) {
                    buffers[b].consumers.push(i);
                }
            }
        }

        // Strict ancestors of every stage, as bit masks (n <= 64).
        let mut ancestors = vec![0u64; n];
        for i in 0..n {
            for &p in &stages[i].predecessors {
                ancestors[i] |= ancestors[p] | (1u64 << p);
            }
        }

        assign_lanes(&mut stages, &g, &order, config.lanes);

        // Arena: happens-before conflicts.
        let accessors: Vec<u64> = buffers
            .iter()
            .map(|b| {
                b.consumers
                    .iter()
                    .fold(1u64 << b.producer, |m, &c| m | (1u64 << c))
            })
            .collect();
        let requests: Vec<BufferRequest> = buffers
            .iter()
            .map(|b| BufferRequest {
                size: b.bytes,
                align: b.elem_type.align.max(64),
                first: b.producer,
                last: if b.published {
                    n
                } else {
                    b.consumers.iter().copied().max().unwrap_or(b.producer)
                },
            })
            .collect();
        // `a` is done with before `b` is written: every accessor of `a` is a strict
        // ancestor of b's producer, and `a` is not read by the publisher.
        let before = |a: usize, b: usize| -> bool {
            !buffers[a].published && accessors[a] & !ancestors[buffers[b].producer] == 0
        };
        let conflicts = |i: usize, j: usize| i != j && !before(i, j) && !before(j, i);
        let layout = plan_with_conflicts(&requests, &conflicts)?;
        for (b, off) in buffers.iter_mut().zip(&layout.offsets) {
            b.offset = *off;
        }
        for s in &mut stages {
            s.inputs = s.input_buffers.iter().map(|&b| view(&buffers[b])).collect();
            s.outputs = s
                .output_buffers
                .iter()
                .map(|&b| view(&buffers[b]))
                .collect();
        }
        let published: Vec<usize> = g.published.iter().map(|name| buffer_index[name]).collect();

        let mut decls: Vec<Option<crate::graph::StageDecl>> =
            g.stages.into_iter().map(Some).collect();
        let objects = order
            .iter()
            .map(|&d| {
                let decl = decls[d].take().expect("each declaration taken once");
                let fallback = decl.fallback.unwrap_or_else(|| decl.stage.make_fallback());
                Some((decl.stage, fallback))
            })
            .collect();

        Ok(Plan {
            stages,
            buffers,
            published,
            layout,
            config: config.clone(),
            objects,
        })
    }

    /// Stages in plan order.
    pub fn stages(&self) -> &[StagePlan] {
        &self.stages
    }

    /// Buffers, numbered by producer position.
    pub fn buffers(&self) -> &[BufferPlan] {
        &self.buffers
    }

    /// Published buffers (plan buffer indices), in `publish` order.
    pub fn published(&self) -> &[usize] {
        &self.published
    }

    /// The arena layout of one frame slot.
    pub fn layout(&self) -> &ArenaLayout {
        &self.layout
    }

    /// Settings the plan was built with.
    pub fn config(&self) -> &PlanConfig {
        &self.config
    }

    /// Index of the stage with this name.
    pub fn stage_index(&self, name: &str) -> Option<usize> {
        self.stages.iter().position(|s| s.name == name)
    }

    /// A human-readable description: stages with lanes and budgets, buffers with offsets.
    pub fn describe(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "plan: {} stages on {} lanes, {} frame slots\n",
            self.stages.len(),
            self.config.lanes,
            self.config.frame_slots
        ));
        for (i, st) in self.stages.iter().enumerate() {
            let preds: Vec<&str> = st
                .predecessors
                .iter()
                .map(|&p| self.stages[p].name.as_str())
                .collect();
            s.push_str(&format!(
                "  #{i:<2} {:<20} lane {}  budget {:>8.3} ms  {:?}  after [{}]\n",
                st.name,
                st.lane,
                st.budget_ns as f64 / 1e6,
                st.criticality,
                preds.join(", ")
            ));
        }
        s.push_str(&format!(
            "arena: {} bytes per slot (no reuse would need {}), {} buffers\n",
            self.layout.peak_bytes,
            self.layout.sum_of_buffers,
            self.buffers.len()
        ));
        for b in &self.buffers {
            s.push_str(&format!(
                "  {:<20} {:>10} B at {:>10}  {}[{}]{}\n",
                b.name,
                b.bytes,
                b.offset,
                b.elem,
                b.len,
                if b.published { "  published" } else { "" }
            ));
        }
        s
    }
}

fn view(b: &BufferPlan) -> PortView {
    PortView {
        offset: b.offset,
        len: b.len,
        elem: b.elem_type,
    }
}

/// Kahn's algorithm, lowest declaration index first. On a cycle, returns one cycle's path.
fn topological_order(preds: &[Vec<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = preds.len();
    let mut indegree: Vec<usize> = preds.iter().map(|p| p.len()).collect();
    let mut succs: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, p) in preds.iter().enumerate() {
        for &w in p {
            succs[w].push(i);
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &s in &succs[i] {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                ready.insert(s);
            }
        }
    }
    if order.len() == n {
        return Ok(order);
    }
    // Walk predecessors among the unplaced stages until one repeats: that is a cycle.
    let stuck: Vec<bool> = (0..n).map(|i| indegree[i] > 0).collect();
    let start = (0..n).find(|&i| stuck[i]).expect("some stage is stuck");
    let mut path = vec![start];
    let mut cur = start;
    loop {
        let next = *preds[cur]
            .iter()
            .find(|&&p| stuck[p])
            .expect("a stuck stage has a stuck predecessor");
        if let Some(k) = path.iter().position(|&x| x == next) {
            let mut cycle: Vec<usize> = path[k..].to_vec();
            cycle.reverse();
            cycle.push(cycle[0]);
            return Err(cycle);
        }
        path.push(next);
        cur = next;
    }
}

fn assign_lanes(stages: &mut [StagePlan], g: &GraphBuilder, order: &[usize], lanes: usize) {
    let mut lane_free = vec![0u64; lanes];
    let mut finish = vec![0u64; stages.len()];
    for i in 0..stages.len() {
        let cost = stages[i].budget_ns.max(1);
        let ready = stages[i]
            .predecessors
            .iter()
            .map(|&p| finish[p])
            .max()
            .unwrap_or(0);
        let latest_pred_lane = stages[i]
            .predecessors
            .iter()
            .max_by_key(|&&p| (finish[p], std::cmp::Reverse(p)))
            .map(|&p| stages[p].lane);
        let lane = match g.stages[order[i]].lane {
            Some(l) => l % lanes,
            None => (0..lanes)
                .min_by_key(|&l| (lane_free[l].max(ready), Some(l) != latest_pred_lane, l))
                .expect("at least one lane"),
        };
        let start = lane_free[lane].max(ready);
        finish[i] = start + cost;
        lane_free[lane] = finish[i];
        stages[i].lane = lane;
    }
}

#[cfg(test)]
mod tests;
