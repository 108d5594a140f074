"""A budget is declared once (``BudgetFields``): the row a calibration stores, the spec an
admission check takes and the API's answer are all read off that one declaration."""
from __future__ import annotations

from opdweb.budgets.api import BudgetOut
from opdweb.budgets.models import MismatchBudget
from opdweb.budgets.receivers import budget_row
from tests.web.results import calibration_result
from tests.web.test_budget_jobs import stored_calibration
from workers.science.budget.config import BudgetFields, BudgetSpec
from workers.science.budget.results import CalibratedBudget, CalibrationResult

#: The row's own columns, which no calibration sets.
BOOKKEEPING = {"id", "team", "created_by", "created_at", "calibration_job", "superseded_by"}


def test_the_row_holds_every_declared_field_and_nothing_else():
    columns = {f.name for f in MismatchBudget._meta.concrete_fields} - BOOKKEEPING
    row = budget_row(CalibrationResult.model_validate(calibration_result("/models/student", 9.1)))
    assert set(row) == columns
    evidence = {"teacher", "curve", "baseline", "rule"}
    assert set(BudgetFields.model_fields) | evidence < set(CalibratedBudget.model_fields)
    assert (row["bracket_low"], row["bracket_high"]) == (9.1, 91.0) and row["checkpoint_hash"] == "abc"


def test_the_api_answer_and_the_spec_derive_from_the_declaration():
    assert set(BudgetFields.model_fields) <= set(BudgetOut.model_fields)
    # the spec adds the stored row's id, the team's criterion and the judged ladder (from the curve)
    assert set(BudgetSpec.model_fields) == set(BudgetFields.model_fields) | {"id", "criterion", "ladder"}


def test_a_stored_calibration_gives_back_the_budget_it_found(member):
    user, team = member
    budget = stored_calibration(team, user, "/models/student", 9.1)
    spec = BudgetSpec.model_validate(budget.spec())
    found = CalibrationResult.model_validate(budget.calibration_job.result)
    assert spec.model_dump(exclude={"id", "criterion", "ladder"}) == found.model_dump(
        include=set(BudgetFields.model_fields))
    assert spec.id == budget.pk and spec.criterion == "strict"
    assert [(r.multiple, r.seeds, r.within) for r in spec.ladder] == [
        (c.multiple, len(c.accuracies), c.within) for c in found.curve]
    out = BudgetOut.model_validate(budget)
    assert (out.budget, out.bracket_low, out.bracket_high, out.team) == (9.1, 9.1, 91.0, team.slug)
