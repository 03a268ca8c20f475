"""A deterministic reply agent: 120 customer messages about an order, no provider credentials.

The agent answers from canned replies, one per situation, and some of them are poor on purpose:
impatient customers are told to read the manual, a question about tracking gets a sarcastic
reply, an unclear message gets a reply that does not name the order. A deterministic check
(``mentions_order``) catches the last; only a judge can tell a rude reply from a polite one.
"""

from oloproof import system

REPLIES = {
    "shipped": "Hello! Your order {order} shipped yesterday and should arrive on Friday. "
               "Is there anything else I can help you with?",
    "out_for_delivery": "Thanks for waiting! Order {order} is out for delivery and will reach you today.",
    # polite bad news: the stand-in judge wrongly fails it (it reads "unfortunately" as rude)
    "delayed": "I'm sorry: unfortunately order {order} is delayed by a day. We have refunded "
               "the shipping fee, and it will arrive on Saturday.",
    "impatient": "Order {order}? Read the manual before asking, it is all explained there.",
    # sarcasm: the stand-in judge wrongly passes it
    "tracking": "Obviously order {order} is on its way, as the tracking page you did not open says.",
    "unclear": "I can't help with that.",
}


@system(name="reply-agent", version="1")
def run(case):
    situation = case.input["situation"]
    return {"reply": REPLIES[situation].format(order=case.input["order_id"])}
