"""A worker's model on several contexts (gluon's ``split_and_load`` pattern):
the mode exchanges the first copy of every parameter, so the gradients are
summed into it first and the weights copied back to the others after."""


class ContextReplicas:
    """The copies of a worker's parameters across its contexts.

    Args:
        params: ``() -> list of gluon Parameters``, read once, at the first use
            (a parameter's contexts are fixed at initialization).
    """

    def __init__(self, params):
        self._params = params
        self._multi = None
        self.reduced = False   # this iteration's gradients are summed over the contexts

    def multi_context(self):
        """The parameters that live on several contexts (found once), so a
        one-context worker's step pays nothing for the multi-context path."""
        if self._multi is None:
            self._multi = [p for p in self._params() if len(p.list_ctx()) > 1]
        return self._multi

    def reduce_grads(self):
        """Sum every parameter's gradient over its contexts, as
        ``gluon.Trainer``'s local kvstore does, into every copy (each context's
        local optimizer then applies the same update to the same weights).
        Once per iteration, until :meth:`next_iteration`: ``allreduce_grads()``
        then ``update()`` sums once."""
        if self.reduced:
            return
        self.reduced = True
        for p in self.multi_context():
            if p.grad_req == "null":
                continue
            grads = p.list_grad()
            for g in grads[1:]:
                grads[0] += g.as_in_context(grads[0].context)
            for g in grads[1:]:
                grads[0].copyto(g)

    def next_iteration(self):
        """The step is over: the next iteration's gradients are not summed yet."""
        self.reduced = False

    def broadcast(self):
        """Copy every parameter's first copy to its other contexts; BatchNorm
        statistics included, so every context holds the worker's model."""
        for p in self.multi_context():
            data = p.list_data()
            for d in data[1:]:
                data[0].copyto(d)
