"""Process groups: `Group`, ordered world ranks."""

from ._constants import ERR_ARG, ERR_GROUP, ERR_RANK, IDENT, PROC_NULL, SIMILAR, UNDEFINED, UNEQUAL, MPIException


def _builtin(name):
    from .. import MPI  # GROUP_NULL and GROUP_EMPTY unpickle to the very same handles
    return getattr(MPI, name)


class Group:
    """An ordered set of processes (world ranks). GROUP_NULL holds nothing; GROUP_EMPTY is a group of none."""

    __slots__ = ("_ranks", "_me", "__weakref__")

    def __new__(cls, group=None):
        if group is not None and not isinstance(group, Group):
            raise TypeError(f"expected an MPI.Group, got {type(group).__name__}")
        self = object.__new__(cls)
        self._ranks, self._me = (group._ranks, group._me) if group is not None else (None, None)
        return self

    @classmethod
    def _of(cls, ranks, me):
        self = object.__new__(cls)
        self._ranks, self._me = tuple(ranks), me
        return self

    def _r(self):
        if self._ranks is None:
            raise MPIException(ERR_GROUP, "operation on MPI.GROUP_NULL")
        return self._ranks

    def Get_size(self):
        return len(self._r())

    def Get_rank(self):
        ranks = self._r()
        return ranks.index(self._me) if self._me in ranks else UNDEFINED

    size = property(Get_size)
    rank = property(Get_rank)

    def _check(self, ranks):
        n = len(self._r())
        ranks = [int(r) for r in ranks]
        for r in ranks:
            if not 0 <= r < n:
                raise MPIException(ERR_RANK, f"Group: rank {r} is not in a group of size {n}")
        return ranks

    def Incl(self, ranks):
        return Group._of([self._ranks[r] for r in self._check(ranks)], self._me)

    def Excl(self, ranks):
        drop = set(self._check(ranks))
        return Group._of([w for i, w in enumerate(self._ranks) if i not in drop], self._me)

    @staticmethod
    def _expand(ranges):
        out = []
        for first, last, stride in ranges:
            if stride == 0:
                raise MPIException(ERR_ARG, "Group range with stride 0")
            out.extend(range(first, last + (1 if stride > 0 else -1), stride))
        return out

    def Range_incl(self, ranks):
        return self.Incl(self._expand(ranks))

    def Range_excl(self, ranks):
        return self.Excl(self._expand(ranks))

    def Translate_ranks(self, ranks=None, group=None):
        mine = self._r()
        ranks = range(len(mine)) if ranks is None else [int(r) for r in ranks]
        if group is None:
            return list(ranks)
        other = group._r()
        out = []
        for r in ranks:
            if r == PROC_NULL:
                out.append(PROC_NULL)
                continue
            self._check([r])
            w = mine[r]
            out.append(other.index(w) if w in other else UNDEFINED)
        return out

    def Compare(self, group2, group=None):
        a, b = (self, group2) if group is None else (group2, group)
        ra, rb = a._r(), b._r()
        if ra == rb:
            return IDENT
        return SIMILAR if sorted(ra) == sorted(rb) else UNEQUAL

    def Union(self, group2, group=None):
        a, b = (self, group2) if group is None else (group2, group)
        return Group._of(list(a._r()) + [w for w in b._r() if w not in a._ranks], a._me)

    def Intersection(self, group2, group=None):
        a, b = (self, group2) if group is None else (group2, group)
        return Group._of([w for w in a._r() if w in b._r()], a._me)

    def Difference(self, group2, group=None):
        a, b = (self, group2) if group is None else (group2, group)
        return Group._of([w for w in a._r() if w not in b._r()], a._me)

    def Dup(self):
        return Group._of(self._r(), self._me)

    def Free(self):
        self._r()
        self._ranks = None

    def free(self):
        """Free() made safe: nothing for GROUP_NULL or GROUP_EMPTY itself."""
        if self._ranks is not None and self is not _builtin("GROUP_EMPTY"):
            self.Free()

    def __eq__(self, other):
        if not isinstance(other, Group):
            return NotImplemented
        return self._ranks == other._ranks

    __hash__ = None

    def __bool__(self):
        return self._ranks is not None

    def __reduce__(self):
        from ._handles import null_reduce
        return null_reduce(self, "GROUP_NULL" if self._ranks is None else "GROUP_EMPTY", self._ranks in (None, ()))

    def __repr__(self):
        return "<MPI.Group NULL>" if self._ranks is None else f"<MPI.Group of {len(self._ranks)}>"
