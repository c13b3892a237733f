//! Declaring a graph: stages, their typed ports, budgets and criticality.
//!
//! Stages are wired by buffer *name*: a stage writes `"features"`, another reads
//! `"features"`. [`GraphBuilder::build`] checks the wiring and compiles it into a static
//! [`crate::plan::Plan`]; every mistake is reported at build time with the stages and
//! buffers involved:
//!
//! - a stage name used twice,
//! - a buffer read by a stage but written by none,
//! - a buffer written by two stages,
//! - a reader whose element type or length differs from the writer's,
//! - a cycle (named stage by stage),
//! - a published buffer no stage writes, more than [`MAX_STAGES`] stages, more than 64
//!   outputs on one stage, a zero-length buffer.
//!
//! Building allocates (it runs once, at start-up); nothing here runs per frame.

use crate::plan::{Plan, PlanConfig};
use crate::stage::{Criticality, ElemType, Element, Fallback, Stage};

/// Most stages one graph may hold (stage sets are 64-bit masks on the hot path).
pub const MAX_STAGES: usize = 64;

/// A declared port: which buffer, which element type, how many elements.
#[derive(Clone, Debug)]
pub struct PortDecl {
    /// Buffer name.
    pub buffer: String,
    /// Element type.
    pub elem: ElemType,
    /// Number of elements.
    pub len: usize,
}

/// One stage as declared.
pub(crate) struct StageDecl {
    pub name: String,
    pub stage: Box<dyn Stage>,
    pub fallback: Option<Box<dyn Fallback>>,
    pub inputs: Vec<PortDecl>,
    pub outputs: Vec<PortDecl>,
    pub budget_ns: u64,
    pub criticality: Criticality,
    pub lane: Option<usize>,
}

/// Collects stages and published buffers, then builds the plan.
#[derive(Default)]
pub struct GraphBuilder {
    pub(crate) stages: Vec<StageDecl>,
    pub(crate) published: Vec<String>,
}

impl std::fmt::Debug for GraphBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GraphBuilder")
            .field(
                "stages",
                &self.stages.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .field("published", &self.published)
            .finish()
    }
}

/// Chained configuration of the stage just added.
pub struct StageBuilder<'g> {
    decl: &'g mut StageDecl,
}

impl std::fmt::Debug for StageBuilder<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageBuilder")
            .field("name", &self.decl.name)
            .finish()
    }
}

impl StageBuilder<'_> {
    /// Declares the next input port (index = number of inputs declared before it).
    pub fn reads<T: Element>(self, buffer: &str, len: usize) -> Self {
        self.decl.inputs.push(PortDecl {
            buffer: buffer.to_string(),
            elem: ElemType::of::<T>(),
            len,
        });
        self
    }

    /// Declares the next output port.
    pub fn writes<T: Element>(self, buffer: &str, len: usize) -> Self {
        self.decl.outputs.push(PortDecl {
            buffer: buffer.to_string(),
            elem: ElemType::of::<T>(),
            len,
        });
        self
    }

    /// WCET allowance, in nanoseconds (0 = no budget check).
    pub fn budget_ns(self, ns: u64) -> Self {
        self.decl.budget_ns = ns;
        self
    }

    /// WCET allowance, in microseconds.
    pub fn budget_us(self, us: u64) -> Self {
        self.budget_ns(us.saturating_mul(1000))
    }

    /// How the ladder treats this stage's faults.
    pub fn criticality(self, c: Criticality) -> Self {
        self.decl.criticality = c;
        self
    }

    /// Pins the stage to a lane (taken modulo the lane count).
    pub fn lane(self, lane: usize) -> Self {
        self.decl.lane = Some(lane);
        self
    }

    /// Overrides the fallback made by `Stage::make_fallback`.
    pub fn fallback(self, f: impl Fallback + 'static) -> Self {
        self.decl.fallback = Some(Box::new(f));
        self
    }
}

impl GraphBuilder {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a stage; configure it with the returned builder.
    pub fn stage(&mut self, name: &str, stage: impl Stage + 'static) -> StageBuilder<'_> {
        self.stage_boxed(name, Box::new(stage))
    }

    /// Adds an already boxed stage.
    fn stage_boxed(&mut self, name: &str, stage: Box<dyn Stage>) -> StageBuilder<'_> {
        self.stages.push(StageDecl {
            name: name.to_string(),
            stage,
            fallback: None,
            inputs: Vec::new(),
            outputs: Vec::new(),
            budget_ns: 0,
            criticality: Criticality::Normal,
            lane: None,
        });
        let decl = self.stages.last_mut().expect("just pushed");
        StageBuilder { decl }
    }

    /// Marks a buffer as a frame output: handed to the publisher, held for the frame fallback.
    pub fn publish(&mut self, buffer: &str) -> &mut Self {
        self.published.push(buffer.to_string());
        self
    }

    /// Checks the wiring and compiles the static plan.
    pub fn build(self, config: &PlanConfig) -> Result<Plan, PlanError> {
        Plan::compile(self, config)
    }
}

/// Why a graph could not be compiled. Every message names the stages and buffers involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The graph has no stage.
    #[error("the graph has no stages: add at least one with GraphBuilder::stage")]
    Empty,
    /// Too many stages.
    #[error(
        "the graph has {count} stages; at most {MAX_STAGES} are supported: merge small stages"
    )]
    TooManyStages {
        /// Stages declared.
        count: usize,
    },
    /// Two stages share a name.
    #[error("two stages are named '{name}': stage names must be unique")]
    DuplicateStage {
        /// The name.
        name: String,
    },
    /// A buffer is read but never written.
    #[error("stage '{stage}' reads buffer '{buffer}', which no stage writes: add a stage that writes it or fix the name")]
    NoProducer {
        /// Reader.
        stage: String,
        /// Buffer.
        buffer: String,
    },
    /// A buffer has two writers.
    #[error("buffer '{buffer}' is written by both '{first}' and '{second}': each buffer has exactly one producer")]
    TwoProducers {
        /// Buffer.
        buffer: String,
        /// First writer.
        first: String,
        /// Second writer.
        second: String,
    },
    /// A reader disagrees with the writer about the type or length.
    #[error("stage '{reader}' reads buffer '{buffer}' as {reader_type}[{reader_len}] but '{writer}' writes it as {writer_type}[{writer_len}]: make the declarations agree")]
    TypeMismatch {
        /// Buffer.
        buffer: String,
        /// Writer stage.
        writer: String,
        /// Writer's element type.
        writer_type: &'static str,
        /// Writer's length.
        writer_len: usize,
        /// Reader stage.
        reader: String,
        /// Reader's element type.
        reader_type: &'static str,
        /// Reader's length.
        reader_len: usize,
    },
    /// The stages form a cycle.
    #[error("the graph has a cycle: {path}: a stage cannot depend on its own output, break the loop (state kept inside a stage carries data across frames)")]
    Cycle {
        /// e.g. "a -> b -> c -> a".
        path: String,
    },
    /// A published buffer does not exist.
    #[error("buffer '{buffer}' is published but no stage writes it")]
    UnknownPublished {
        /// Buffer.
        buffer: String,
    },
    /// A port with zero elements.
    #[error("stage '{stage}' declares buffer '{buffer}' with 0 elements: give it a length")]
    EmptyBuffer {
        /// Stage.
        stage: String,
        /// Buffer.
        buffer: String,
    },
    /// A stage with too many outputs.
    #[error("stage '{stage}' declares {count} outputs; at most 64 are supported")]
    TooManyOutputs {
        /// Stage.
        stage: String,
        /// Outputs declared.
        count: usize,
    },
    /// A bad plan configuration.
    #[error("invalid plan configuration: {0}")]
    Config(String),
    /// The arena could not be planned or allocated.
    #[error("arena: {0}")]
    Arena(#[from] crate::arena::ArenaError),
}
