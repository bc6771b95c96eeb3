"""tests/mutation.py refuses an edit that would leave the copy unbroken, loudly and never as an
AssertionError (which a ``pytest.raises(AssertionError)`` around the mutant would swallow)."""

from __future__ import annotations

import pytest

from tests import mutation
from tests.mutation import MutationSiteError, mutant, with_globals


def halve(x: int) -> int:
    return x // 2


def test_a_mutant_runs_its_edit() -> None:
    assert mutant(halve, ("x // 2", "x // 3"))(9) == 3
    assert halve(9) == 4


@pytest.mark.parametrize("edits", [
    (("x // 5", "x"),),  # not in the source
    (("x", "y"),),  # in it more than once (x is both the argument and the operand)
    (("x // 2", "x // 2"),),  # changes nothing
    (),  # no edit at all
])
def test_an_edit_that_breaks_nothing_is_refused(edits: tuple[tuple[str, str], ...]) -> None:
    with pytest.raises(MutationSiteError):
        mutant(halve, *edits)


def test_a_refused_edit_escapes_pytest_raises_assertion_error() -> None:
    with pytest.raises(MutationSiteError):
        with pytest.raises(AssertionError):
            mutant(halve, ("x // 5", "x"))


def test_an_assert_based_refusal_would_be_swallowed() -> None:
    # The broken variant: the refusal as a plain assert (as it once was). Built inside
    # pytest.raises(AssertionError), a missing site then passes without testing anything.
    broken = mutant(mutation.mutant, (
        "        if count != 1:\n            raise MutationSiteError(",
        "        if count != 1:\n            raise AssertionError("))
    with pytest.raises(AssertionError):
        broken(halve, ("x // 5", "x"))  # vacuous: nothing was mutated


def quarter(x: int) -> int:
    return halve(halve(x))


def test_with_globals_rebinds_a_copy_and_leaves_the_module_alone() -> None:
    third = mutant(halve, ("x // 2", "x // 3"))
    assert with_globals(quarter, halve=third)(27) == 3
    assert quarter(27) == 6 and globals()["halve"] is halve


def test_with_globals_refuses_a_name_the_function_does_not_read() -> None:
    with pytest.raises(MutationSiteError):
        with_globals(quarter, third=halve)
