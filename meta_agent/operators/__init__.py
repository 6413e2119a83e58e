"""Mutation operators: a parent (or two) and its context become a child genome.

- `make_operator(name)`, `choose_operator(weights, rng)`, `operator_names()`: operators by name, built-in
  (`OPERATORS`, `OPERATOR_KINDS`) or installed under the entry point group `cambrian.operators`
  (`OPERATOR_REGISTRY`); each operator's `kind` says how the loop drives it;
- the FM operators `RewriteOperator`, `DiffOperator`, `LinesOperator`, `CrossoverOperator` (one call each)
  and `DiagnoseOperator` (a plan, then the edit);
- `SelfModifyOperator` (the parent agent writes its child in the sandbox) and `AstMutation` (no FM);
- the protocols the loop drives them by: `Operator`, `TwoStepOperator`, `SandboxOperator`,
  `LocalOperator`, and `supports_self_modify`;
- prompts: `PromptContext`, `ParentInfo`, `PromptLimits`, `render` and `template_names` (the templates in
  `prompts/`, one file each), `PromptTemplateError`;
- reply grammars for constrained decoding: `search_replace_grammar`, `code_grammar`, `gbnf_literal`.

See `_base` for how the loop drives each kind.
"""

from meta_agent.operators._ast_mutate import AstMutation, collect_sites
from meta_agent.operators._base import (
    OPERATOR_KINDS,
    OPERATORS,
    AnyOperator,
    LocalOperator,
    Operator,
    OperatorWeightsError,
    SandboxOperator,
    TwoStepOperator,
    UnknownOperatorError,
    supports_self_modify,
)
from meta_agent.operators._fm import CrossoverOperator, DiagnoseOperator, DiffOperator, LinesOperator, RewriteOperator
from meta_agent.operators._grammars import code_grammar, gbnf_literal, search_replace_grammar
from meta_agent.operators._prompting import (
    ParentInfo,
    PromptContext,
    PromptLimits,
    PromptTemplateError,
    render,
    template_names,
)
from meta_agent.operators._registry import OPERATOR_REGISTRY, choose_operator, make_operator, operator_names
from meta_agent.operators._self_modify import SelfModifyOperator

__all__ = [
    "OPERATORS", "OPERATOR_KINDS", "OPERATOR_REGISTRY", "AnyOperator", "AstMutation", "CrossoverOperator",
    "DiagnoseOperator", "DiffOperator", "LinesOperator", "LocalOperator", "Operator", "OperatorWeightsError",
    "ParentInfo", "PromptContext", "PromptLimits", "PromptTemplateError", "RewriteOperator", "SandboxOperator",
    "SelfModifyOperator", "TwoStepOperator", "UnknownOperatorError", "choose_operator", "code_grammar",
    "collect_sites", "gbnf_literal", "make_operator", "operator_names", "render", "search_replace_grammar",
    "supports_self_modify", "template_names",
]  # fmt: skip
