"""What every parameterised plug-in family shares (placement policies, sharing policies,
passes): a ``name``, parameters declared once (:class:`~workloads.params.Param`: type,
default, valid values), and scikit-learn's ``get_params`` / ``set_params`` / ``clone`` /
``repr``. A family's registry makes members from ``name:key=value,...``
(:meth:`workloads.registry.Registry.make`).
"""

from __future__ import annotations

import copy
from typing import Any, ClassVar, Self

from workloads.errors import PlacelabError
from workloads.params import Param

__all__ = ["Plugin"]


class Plugin:
    """A member of a plug-in family. Constructor keyword parameters are declared in
    :attr:`params` and stored under their own names (each checked by :meth:`checked`), so
    :meth:`get_params` and :func:`repr` show them and :meth:`clone` rebuilds the member.

    >>> from workloads.passes import make_pass
    >>> p = make_pass("train:optimizer=adam")
    >>> p.get_params(), p.clone().get_params() == p.get_params()
    ({'optimizer': 'adam', 'colocate': 'ops'}, True)
    >>> p.set_params(optimizer="sgd")
    TrainingStep(optimizer='sgd', colocate='ops')
    """

    name: ClassVar[str] = ""
    #: The constructor's keyword parameters: type, default, valid values.
    params: ClassVar[tuple[Param, ...]] = ()
    #: What the family calls a member, and the error its members raise, for messages.
    family: ClassVar[str] = "plug-in"
    error: ClassVar[type[PlacelabError]] = PlacelabError

    def checked(self, name: str, value: Any) -> Any:
        """``value`` checked against the declared parameter ``name``."""
        found = [p for p in self.params if p.name == name]
        if not found:
            raise self.error(f"{self.family} {self.name!r}: {name} is not a declared "
                             f"parameter (params lists none by that name)")
        return found[0].check(self.name, value, what=self.family, error=self.error)

    def get_params(self) -> dict[str, Any]:
        """The declared parameters and their current values."""
        return {p.name: getattr(self, p.name) for p in self.params if hasattr(self, p.name)}

    def set_params(self, **values: Any) -> Self:
        """Set declared parameters (each checked as the constructor checks it); returns
        the member."""
        for key, value in values.items():
            setattr(self, key, self.checked(key, value))
        return self

    def clone(self) -> Self:
        """A new member of the same class with copies of the same parameters (a seed's
        generator copied with its state, as scikit-learn's ``clone`` does)."""
        return type(self)(**copy.deepcopy(self.get_params()))

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"
