"""python scripts/make_example_data.py

Writes assets/example_tickets.csv: 200 synthetic customer-support tickets (subject, body,
product, reply) for six smart-home and software products and 20 kinds of issue. The seed is
fixed, so the committed file is exactly what this script writes. Every reply follows the house
style in dragonfarm_core/data/example.py (checked before writing), greets the customer by the
first name they signed with, and is short enough to train on a CPU in minutes. About a quarter
of the replies quote the ticket id, a habit a later reinforcement step rewards.
"""

from __future__ import annotations

import csv
import random
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dragonfarm_core.data.example import EXAMPLE_FILE, HOUSE_STYLE_PATTERN  # noqa: E402

SEED, N_TICKETS = 20240917, 200

# name, what the reply calls it, short name in customer text, companion app, device or software
PRODUCTS = [
    ("Nimbus Thermostat", "Nimbus Thermostat", "thermostat", "the Nimbus app", "device"),
    ("Glow Smart Bulb", "Glow Smart Bulb", "bulb", "the Glow app", "device"),
    ("Sentinel Doorbell", "Sentinel Doorbell", "doorbell", "the Sentinel app", "device"),
    ("Harbor Mesh Router", "Harbor Mesh Router", "router", "the Harbor app", "device"),
    ("TaskPilot", "TaskPilot account", "TaskPilot", "the TaskPilot app", "software"),
    ("VaultSync", "VaultSync backup", "VaultSync", "the VaultSync app", "software"),
]

# One block per issue: "for:" names the products it fits (device, software, any, or a short
# name), "details:" the kinds of extra sentence a customer may add; then subjects, openers (>),
# the reply's acknowledgement sentence and its three steps. {short}, {app}, {the_short} and
# their capitalised forms are filled in per product.
ISSUES_TEXT = """
[wifi] for: thermostat bulb doorbell; details: device upset neutral
subjects: {Short} keeps dropping off Wi-Fi | {Short} goes offline every night | Wi-Fi disconnects
> My {short} keeps dropping off the Wi-Fi, usually a few times a day.
> Since last week the {short} disconnects from our network and shows as offline.
> The {short} loses its Wi-Fi connection every night and I have to unplug it.
ack: I'm sorry it keeps losing its connection.
1. Open {app}, go to Settings > Network and check that it is on your 2.4 GHz network.
2. Move the router or a mesh point within about 10 metres of it, if you can.
3. Restart it by holding the button for 10 seconds, then wait two minutes for it to rejoin.

[setup] for: device; details: device upset neutral
subjects: Can't finish setting up my {short} | Setup fails at the last step | Pairing won't work
> I can't get the new {short} set up. {App} gets stuck on 'Connecting'.
> Setup fails every time at the pairing step, even right next to the router.
> I unboxed the {short} today and the setup keeps timing out.
ack: Let's get it set up.
1. Turn on Bluetooth and location access for {app}, which setup needs.
2. Hold the button for 5 seconds until the light blinks blue to restart pairing.
3. Keep your phone on the same 2.4 GHz network the {short} will use until setup is done.

[firmware] for: device; details: device upset neutral
subjects: Firmware update stuck | Update failed on my {short} | {Short} stuck at 40% updating
> The firmware update on my {short} has been stuck for hours.
> {App} says the update failed and to try again, but it fails every time.
> My {short} started an update last night and now it just blinks orange.
ack: I'm sorry the update didn't go through.
1. Leave it powered on and on Wi-Fi for 30 minutes; updates resume on their own.
2. If it still blinks, unplug it for 10 seconds and plug it back in.
3. In {app}, open Device > Firmware and tap Retry Update.

[outage] for: device; details: device upset neutral
subjects: {Short} offline after a power cut | Offline since the power outage | Won't reconnect
> We had a power cut yesterday and the {short} has been offline ever since.
> After the storm knocked our power out, the {short} never came back online.
> Since a short power outage the {short} shows as offline in {app}.
ack: Power cuts can leave it waiting for the network.
1. Restart your router first and wait until the internet is back.
2. Then unplug the {short} for 30 seconds and plug it back in so it reconnects.
3. If it is still offline, remove it in {app} and add it again; your settings are kept.

[schedule] for: device; details: device upset neutral
subjects: Schedule not working | {Short} ignores my schedule | Automation runs at the wrong time
> The schedule I set for the {short} just doesn't run.
> My automations fire an hour late. I think it started with the clock change.
> The {short} ignores the weekday schedule and only follows the weekend one.
ack: I'm sorry your schedule isn't running as planned.
1. In {app}, check the home's time zone under Settings > Home > Location.
2. Open the schedule and save it again so it syncs to the {short}.
3. Make sure no vacation mode or manual hold is active, as it overrides schedules.

[voice] for: thermostat bulb doorbell; details: device upset neutral
subjects: Voice assistant can't find my {short} | {Short} not working with my speaker
> My voice assistant says it can't find the {short} anymore.
> I linked the {short} to my smart speaker but voice commands do nothing.
> Asking my speaker to control the {short} worked until this week.
ack: Voice control should just work, so let's fix the link.
1. In your voice assistant's app, unlink the Dragonfarm skill and link it again.
2. Ask the assistant to discover devices, then check the {short}'s name there.
3. Give the {short} a simple, unique name in {app} so commands are not ambiguous.

[notify] for: any; details: app upset neutral
subjects: Notifications not arriving | No alerts from {the_short} | Alerts come in late
> I'm not getting any notifications from {the_short} anymore.
> Alerts arrive minutes late, which makes them useless.
> Notifications stopped after I switched to a new phone.
ack: Late or missing alerts are frustrating.
1. Check that notifications are allowed for {app} in your phone's settings.
2. Turn off battery optimisation for {app}, which can delay alerts.
3. Sign out of {app} and back in to register your phone for alerts again.

[login] for: any; details: app upset neutral
subjects: Can't log in | Login code never arrives | Locked out of my account
> I can't log in. It asks for a verification code that never arrives.
> I'm locked out of my account after too many attempts.
> The login page just reloads when I enter my password.
ack: I'm sorry you're locked out.
1. Wait 15 minutes; the lock after repeated attempts clears on its own.
2. Check your spam folder for the code, which comes from no-reply@dragonfarm.example.
3. If it still fails, reset your password from the login page and try again.

[password] for: any; details: upset neutral
subjects: Password reset email missing | No reset email | Can't reset my password
> I asked for a password reset three times but no email arrived.
> The password reset link says it has expired as soon as I click it.
> I forgot my password and the reset email never shows up.
ack: Let's get you back in.
1. Check spam and promotions folders for mail from no-reply@dragonfarm.example.
2. Request one new link and use it within 30 minutes, since older links stop working.
3. Open the link on the same device you requested it from.

[billing] for: any; details: upset neutral
subjects: Charged twice this month | Double charge | Billing error on my card
> I was charged twice for my subscription this month.
> My card statement shows two identical payments for my plan.
> There are two charges on the same day and I only have one plan.
ack: I'm sorry about the double charge.
1. We have flagged the duplicate payment, and it will be refunded within 5 working days.
2. Check Account > Billing to make sure only one subscription is active.
3. If a second plan is listed there, cancel it so it does not renew.

[refund] for: any; details: neutral
subjects: Refund request | I'd like my money back | Return and refund
> {The_short} isn't right for us and I'd like a refund.
> I bought this two weeks ago and want to return it.
> Can I get a refund? It doesn't do what I expected.
ack: We're sorry it didn't work out.
1. Purchases within 30 days qualify for a full refund.
2. Start the request under Account > Orders > Request refund.
3. Once it is approved, the money is back on your card within 5 to 10 working days.

[cancel] for: any; details: neutral
subjects: How do I cancel my plan? | Cancel subscription | Stop auto-renewal
> How do I cancel my subscription? I can't find the option.
> Please stop my plan from renewing next month.
> I want to downgrade to the free plan but don't see how.
ack: Here is how to change your plan.
1. Open Account > Subscription on the website; the app cannot cancel plans.
2. Choose Cancel plan, or Change plan to move to the free tier.
3. You keep paid features until the end of the current billing period.

[crash] for: any; details: app upset neutral
subjects: App crashes on startup | {App} keeps crashing | App closes right away
> Since the last update {app} crashes as soon as I open it.
> The app closes itself whenever I try to open the settings.
> {App} freezes and then crashes on my tablet.
ack: I'm sorry the app keeps crashing.
1. Update {app} to the latest version from your app store.
2. Restart your phone or tablet to clear anything stuck in memory.
3. If it still crashes, uninstall and reinstall the app; your data is kept online.

[share] for: any; details: neutral
subjects: Add my partner to the account | Share access | Invite a family member
> How can my partner use {the_short} from her phone too?
> I want to give my teenager access without sharing my password.
> Can I invite a second person to manage {the_short}?
ack: Sharing access is easy.
1. In {app}, open Settings > Members and tap Invite.
2. Enter their email address and choose whether they can change settings.
3. They accept the invite from the email and sign in with their own account.

[export] for: any; details: neutral
subjects: Export my data | Download all my data | Data export request
> I'd like a copy of all the data you hold about my account.
> How do I export my history before I close my account?
> Is there a way to download everything from my account?
ack: You can download everything yourself.
1. Sign in on the website and open Account > Privacy.
2. Choose Export data; the export is prepared in the background.
3. We email you a download link within 24 hours; it works for 7 days.

[reset] for: device; details: neutral
subjects: How to factory reset | Reset before selling | Factory reset the {short}
> I'm selling the {short}. How do I factory reset it?
> I want to wipe the {short} and start over from scratch.
> How do I reset the {short} to factory settings?
ack: A reset takes a minute.
1. Remove the {short} from {app} first, so it leaves your account.
2. Hold the button for 20 seconds until the light flashes red.
3. Release it and wait for the white light; it is then ready for a new owner.

[battery] for: doorbell; details: device upset neutral
subjects: Battery drains fast | Battery only lasts a few days | Low battery warnings
> The {short}'s battery lasts only a few days now instead of weeks.
> I keep getting low battery warnings even after charging it fully.
> Battery life dropped a lot after the last update.
ack: Short battery life usually comes down to settings.
1. In {app}, lower the motion sensitivity, which wakes the {short} less often.
2. Turn off live view previews, which use a lot of power.
3. Charge it fully with the supplied cable and check the level the next day.

[sync] for: software; details: app upset neutral
subjects: Not syncing between devices | Sync stuck | Changes missing on my laptop
> Changes I make on my phone don't show up on my laptop.
> {Short} has been stuck on 'Syncing' for two days.
> Some items are missing on one device but not the other.
ack: I'm sorry your devices are out of step.
1. Make sure both devices run the latest version of {app}.
2. Sign out and back in on the device that is behind to force a full sync.
3. Check Settings > Sync on both devices and turn it on if it is paused.

[slow] for: software; details: app upset neutral
subjects: {Short} is very slow | Everything takes forever | Performance problems
> {Short} has become very slow; every click takes seconds.
> The backup now takes all night instead of an hour.
> Opening anything in {short} takes forever since last month.
ack: Let's speed things up.
1. Update {app} to the latest version, which fixes several slowdowns.
2. Clear the cache under Settings > Storage > Clear cache.
3. Pause other large uploads or downloads on your network while it runs.

[restore] for: software; details: neutral
subjects: Restore a deleted file | I deleted something by mistake | Recover old version
> I deleted an important file by mistake yesterday. Can I get it back?
> I need last Tuesday's version of a document.
> A whole folder disappeared from my account.
ack: Good news: deleted items are kept for a while.
1. Open {app} and go to Trash, where deleted items stay for 30 days.
2. Select what you need and choose Restore to put it back where it was.
3. For an older version, open the item and use Version history to pick the date.
"""

DETAILS = {
    "device": ["I already restarted my router.", "It worked fine for the first month.",
               "We have two of them and only one has this problem.",
               "I tried turning it off and on again."],
    "app": ["I'm on the latest version of the app.", "It happens on both my phone and my tablet."],
    "upset": ["This is getting really frustrating.", "It's the second time this month."],
    "neutral": ["Any help would be appreciated.", "Thanks in advance.",
                "I couldn't find this in the help pages.", ""],
}  # fmt: skip
CLOSINGS = [
    "If that doesn't solve it, just reply to this email and we'll dig deeper.",
    "Let us know how it goes.",
    "We're here if you need anything else.",
    "I hope this gets everything working again.",
    "Reply here if anything is unclear.",
]
TICKET_CLOSINGS = [
    "If the problem comes back, reply and mention ticket {tid} so we can pick it up.",
    "Your ticket {tid} stays open until you confirm it is fixed.",
    "Quote ticket {tid} if you write to us again about this.",
]
NAMES = """Maria Liam Aisha Kenji Sofia Noah Priya Lucas Fatima Oliver Chen Emma Mateo Zara Jonas
Amara Ethan Yuki Leila Samuel Ingrid Omar Chloe Diego Hana Felix Nadia Arjun Grace Tomas Mei
Ravi Elena Kwame Sara Ben Lena Ivan Nora Hugo Ayesha Pablo Freya Daniel Rosa Malik Julia Tariq
Anna Marco""".split()  # noqa: SIM905 (a word list reads better as text)
SIGNATURES = ["- {name}", "Thanks,\n{name}", "Cheers,\n{name}", "Best,\n{name}",
              "Regards, {name}", "Thank you!\n{name}"]  # fmt: skip


def parse_issues(text: str) -> dict[str, dict[str, list[str]]]:
    """The ISSUES_TEXT blocks as {issue: {"for", "details", "subjects", "openers", "ack", "steps"}}."""
    issues = {}
    for block in text.strip().split("\n\n"):
        head, *lines = block.splitlines()
        key, fits, details = re.fullmatch(r"\[(\w+)\] for: (.+); details: (.+)", head).groups()
        issues[key] = {
            "for": fits.split(),
            "details": details.split(),
            "subjects": lines[0].removeprefix("subjects: ").split(" | "),
            "openers": [x[2:] for x in lines if x.startswith("> ")],
            "ack": [x[5:] for x in lines if x.startswith("ack: ")],
            "steps": [x[3:] for x in lines if re.match(r"\d\. ", x)],
        }
    return issues


ISSUES = parse_issues(ISSUES_TEXT)


def customer_text(
    rng: random.Random, issue: dict[str, list[str]], fill: dict[str, str], tid: str, first: str
) -> tuple[str, str]:
    """(subject, body): an opener, maybe a detail, the ticket id, a signature with the name."""
    subject = rng.choice(issue["subjects"]).format(**fill)
    details = [d for group in issue["details"] for d in DETAILS[group]]
    sentences = [rng.choice(issue["openers"]).format(**fill), rng.choice(details)]
    if rng.random() < 0.5:
        subject = rng.choice(["[{t}] {s}", "{s} ({t})", "Re: {t} - {s}"]).format(t=tid, s=subject)
    else:
        where = ["My ticket number is {t}.", "(Ticket {t})", "Reference: {t}."]
        sentences.insert(rng.randint(1, 2), rng.choice(where).format(t=tid))
    greeting = rng.choice(["", "Hello,\n\n", "Hi there,\n\n", "Hi support,\n\n"])
    signature = rng.choice(SIGNATURES).format(name=first)
    return subject, greeting + " ".join(s for s in sentences if s) + "\n\n" + signature


def ticket(rng: random.Random, tid: str) -> dict[str, str]:
    """One ticket with its house-style reply."""
    name, phrase, short, app, kind = rng.choice(PRODUCTS)
    key = rng.choice([k for k, v in ISSUES.items() if {"any", kind, short} & set(v["for"])])
    issue = ISSUES[key]
    the_short = f"the {short}" if kind == "device" else short
    fill = {"short": short, "app": app, "the_short": the_short}
    fill |= {k[0].upper() + k[1:]: v[0].upper() + v[1:] for k, v in fill.items()}
    first = rng.choice(NAMES)
    subject, body = customer_text(rng, issue, fill, tid, first)
    if rng.random() < 0.35:
        closing = rng.choice(TICKET_CLOSINGS).format(tid=tid)
    else:
        closing = rng.choice(CLOSINGS)
    steps = "\n".join(f"{i}. {s.format(**fill)}" for i, s in enumerate(issue["steps"], start=1))
    reply = (
        f"Hi {first},\n\nThanks for reaching out about your {phrase}. {issue['ack'][0]}\n\n"
        f"{steps}\n\n{closing}\n\nBest regards,\nThe Dragonfarm Support Team"
    )
    return {"subject": subject, "body": body, "product": name, "reply": reply}


def build_rows() -> list[dict[str, str]]:
    """All tickets, checked against the house style; the same every time (fixed seed)."""
    rng = random.Random(SEED)
    ids = rng.sample(range(1000, 10000), N_TICKETS)
    rows = [ticket(rng, f"T-{i}") for i in ids]
    for row, i in zip(rows, ids, strict=True):
        first = row["reply"].split(",", 1)[0].removeprefix("Hi ")
        assert re.search(HOUSE_STYLE_PATTERN, row["reply"]), row["reply"]
        assert first in row["body"] and f"T-{i}" in row["subject"] + row["body"], row
        assert 300 <= len(row["reply"]) <= 700, (len(row["reply"]), row["reply"])
    return rows


def main() -> None:
    rows = build_rows()
    EXAMPLE_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(EXAMPLE_FILE, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(
            f, fieldnames=["subject", "body", "product", "reply"], lineterminator="\n"
        )
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {len(rows)} tickets to {EXAMPLE_FILE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
