"""A stand-in model judge: deterministic, offline, and wrong in a known way.

A real project points ``judge:`` at a provider (``{provider: openai_compatible, ...}``) or at a
function that calls one. This one reads the reply's words, so it makes two kinds of mistake,
like a real judge makes some: it fails polite bad news (a reply with "unfortunately"), and it
passes sarcasm (it cannot hear the tone). People's labels (``labels/``) measure both, and the
report corrects the rate for them.
"""


def polite(prompt, *, case):
    """``{"verdict", "explanation"}`` for one case: ``prompt`` is the text a model would get,
    ``case`` the recorded case (an ``oloproof.CaseView``)."""
    reply = (case.output or {}).get("reply", "")
    words = reply.lower()
    if not reply:
        return {"verdict": "unsure", "explanation": "there is no reply to grade"}
    if "read the manual" in words:
        return {"verdict": "fail", "explanation": "the reply tells the customer to read the manual"}
    if "unfortunately" in words:
        return {"verdict": "fail", "explanation": "the reply sounds negative ('unfortunately')"}
    return {"verdict": "pass", "explanation": "the reply is courteous and answers the question"}
