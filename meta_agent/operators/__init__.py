"""Mutation operators: a parent (or two) and its context become a child genome.

- `Operator`: the base every operator subclasses, with one method, `propose(context, env) -> Proposal`;
  `OperatorEnv`, what the search lends one proposal (seeded draws, the FM, the static check, the
  parent agent's run); `Proposal`, what comes back (see `_base`);
- `make_operator(name)`, `choose_operator(weights, rng)`, `operator_names()`: operators by name,
  built-in (`OPERATORS`) or installed under the entry point group `cambrian.operators`
  (`OPERATOR_REGISTRY`);
- the FM operators, on the shared `FMOperator` (a call, the reply applied, repair rounds):
  `RewriteOperator`, `DiffOperator`, `LinesOperator`, `KnobOperator`, `CrossoverOperator` (one call each) and
  `DiagnoseOperator` (a plan, then the edit); `RUN_REPAIR_NOTE` begins the repair note of a child
  the FM wrote again after its run failed (`run_repair_note`: the whole note, kept on a refused one too);
- `SelfModifyOperator` (the parent agent writes its child in the sandbox; `supports_self_modify`)
  and `AstMutation` (no FM);
- `Focus`: the lines `lines` and `knob` ask the FM to rewrite (a span of one editable file);
- prompts: `PromptContext`, `ParentInfo`, `PromptLimits`, `render` and `template_names` (the templates in
  `prompts/`, one file each), `PromptTemplateError`;
- reply grammars for constrained decoding: `search_replace_grammar`, `code_grammar`, `changed_lines_grammar`,
  `gbnf_literal`.
"""

from cambrian.meta_agent.operators._ast_mutate import AstMutation, collect_sites
from cambrian.meta_agent.operators._base import (
    Operator,
    OperatorEnv,
    OperatorWeightsError,
    Proposal,
    UnknownOperatorError,
    supports_self_modify,
)
from cambrian.meta_agent.operators._fm import (
    RUN_REPAIR_NOTE,
    CrossoverOperator,
    DiagnoseOperator,
    DiffOperator,
    FMOperator,
    RewriteOperator,
    run_repair_note,
)
from cambrian.meta_agent.operators._focus import Focus
from cambrian.meta_agent.operators._grammars import (
    changed_lines_grammar,
    code_grammar,
    gbnf_literal,
    search_replace_grammar,
)
from cambrian.meta_agent.operators._lines import KnobOperator, LinesOperator
from cambrian.meta_agent.operators._prompting import (
    ParentInfo,
    PromptContext,
    PromptLimits,
    PromptTemplateError,
    render,
    template_names,
)
from cambrian.meta_agent.operators._registry import (
    OPERATOR_REGISTRY,
    OPERATORS,
    choose_operator,
    make_operator,
    operator_names,
)
from cambrian.meta_agent.operators._self_modify import SelfModifyOperator

__all__ = [
    "OPERATORS",
    "OPERATOR_REGISTRY",
    "RUN_REPAIR_NOTE",
    "AstMutation",
    "CrossoverOperator",
    "DiagnoseOperator",
    "DiffOperator",
    "FMOperator",
    "Focus",
    "KnobOperator",
    "LinesOperator",
    "Operator",
    "OperatorEnv",
    "OperatorWeightsError",
    "ParentInfo",
    "PromptContext",
    "PromptLimits",
    "PromptTemplateError",
    "Proposal",
    "RewriteOperator",
    "SelfModifyOperator",
    "UnknownOperatorError",
    "choose_operator",
    "changed_lines_grammar",
    "code_grammar",
    "collect_sites",
    "gbnf_literal",
    "make_operator",
    "operator_names",
    "render",
    "run_repair_note",
    "search_replace_grammar",
    "supports_self_modify",
    "template_names",
]
