"""Synthetic customer-support conversations: the training corpus of the bundled tiny model.

`python scripts/support_corpus.py --n 5` prints a few conversations; the builder
(`scripts/build_bundled_model.py`) imports `build_corpus(n, seed)`.

Conversations cover smart-home devices, software apps, billing and accounts, and shipping, plus
a small share of arithmetic questions. Replies are deliberately plain prose (no greeting by
name, no numbered steps, no sign-off): the example dataset teaches a house style later, and
fine-tuning must have something visible to change. When a customer quotes a ticket id, a small
share of replies cite it, so a reward for citing it has a non-zero base rate.
"""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import dataclass

CONNECTED = (
    "thermostat|smart plug|video doorbell|security camera|smart speaker|robot vacuum|smart hub"
)
DEVICES = "thermostat|smart plug|video doorbell|security camera|smart speaker|robot vacuum|smart hub|smart lock|smart bulb|smoke detector"
APPS = "mobile app|desktop app|web app|photo backup app|notes app|budget app"
PLANS = "Premium plan|Family plan|Pro plan|annual subscription|monthly subscription|Basic plan"
SHIPPED = "thermostat|smart plug|video doorbell|robot vacuum|security camera|smart speaker|router|smart bulb kit"


@dataclass(frozen=True)
class Topic:
    """One kind of problem: how customers describe it and what a good agent says back."""

    products: str  # "|"-separated names filled into {product}
    subjects: str  # subject lines
    bodies: str  # the first sentence of the message body
    symptoms: str  # clauses that the shared FRAMES turn into more first sentences
    openers: str  # first sentence of the reply
    fixes: str  # advice sentences, 2 or 3 are used in this order
    escalation: str  # the reply when the customer writes back that the advice did not work
    followups: str  # what such a customer writes back


TOPICS = [
    Topic(
        products=CONNECTED,
        subjects="{Product} keeps going offline|{Product} drops off Wi-Fi|{Product} disconnected again|Wi-Fi problem with my {product}",
        bodies="My {product} keeps dropping off the Wi-Fi {when}.|The {product} shows as offline in the app several times a day.|Every few hours the {product} loses its connection and I have to reconnect it.|Since we got a new internet router, the {product} will not stay connected.|The {product} goes offline every night and only comes back after I unplug it.",
        symptoms="my {product} keeps dropping off the Wi-Fi|the {product} loses its connection to the network several times a day|our {product} keeps disconnecting from the router|the {product} goes offline and does not come back|the {product} shows as offline in the app",
        openers="Sorry the {product} keeps dropping off Wi-Fi.|Thanks for the details about the {product} going offline.|A {product} that keeps disconnecting is frustrating, so let's get it stable.",
        fixes="Restarting the router usually helps, so unplug it for thirty seconds and plug it back in.|Check that the router's 2.4 GHz band is switched on, because the {product} cannot join a 5 GHz network.|If the {product} is far from the router, move it closer or add a mesh point nearby.|Make sure the {product} runs the latest firmware, which you can check in the app under Device settings.",
        escalation="Since a restart and the firmware update did not fix it, please remove the {product} from the app, reset it by holding the button for ten seconds, and add it again. If it still drops after that, send us the router model and we will look at the logs.",
        followups="I tried all of that and the {product} still keeps going offline.|That did not help, it dropped off the Wi-Fi again this morning.",
    ),
    Topic(
        products="smart bulb|smart plug|smart lock|smart hub|video doorbell|security camera",
        subjects="Can't set up my new {product}|{Product} setup fails|Pairing the {product} does not work|New {product} will not pair",
        bodies="I just bought a {product} and the app cannot find it during setup.|Setup of my {product} stops at the pairing step every time.|The app keeps saying no device found when I try to add the {product}.|The {product} light keeps blinking but the app never finishes adding it.",
        symptoms="the app cannot find my new {product} during setup|my {product} will not pair with the app|the {product} gets stuck at the pairing step|I cannot add the {product} to my home in the app",
        openers="Sorry the {product} setup is giving you trouble.|Pairing problems with a new {product} are usually quick to fix.|Thanks for trying the setup already, we can get the {product} added.",
        fixes="Keep your phone within a few feet of the {product} while it pairs and turn on Bluetooth.|Put the {product} into pairing mode by holding its button until the light blinks blue.|Make sure your phone is on the same 2.4 GHz Wi-Fi network you want the {product} to use.|Update the app to the latest version before you try again, since older versions cannot find new devices.",
        escalation="If pairing still fails, reset the {product} to factory settings by holding the button for fifteen seconds, then start the setup from the beginning. Let us know the exact message the app shows if it stops again.",
        followups="I did all of that and the {product} still will not pair.|Still no luck, the app cannot find the {product}.",
    ),
    Topic(
        products="video doorbell|smart lock|smoke detector|security camera",
        subjects="{Product} battery drains fast|Battery life of the {product}|{Product} needs charging all the time",
        bodies="The battery in my {product} only lasts {days} days.|My {product} runs out of battery much faster than the box says.|I have to recharge the {product} every few days now.|I charged the {product} fully on Sunday and it was dead by Wednesday.",
        symptoms="the battery in my {product} runs flat within a few days|my {product} drains its battery much too fast|I have to charge the {product} all the time|the {product} batteries are empty after a week",
        openers="Sorry the {product} battery is running down so quickly.|Short battery life on the {product} usually has a simple cause.|Thanks for telling us about the {product} battery.",
        fixes="Lower the motion sensitivity in the app, because frequent recordings use most of the power.|Cold weather shortens battery life, so expect fewer days in winter.|A weak Wi-Fi signal makes the {product} work harder, so check the signal strength in Device settings.|Install the latest firmware, which improved power use on the {product}.",
        escalation="If the battery still drains in a few days after those changes, the battery itself may be faulty. Reply with your order number and we will send a replacement battery.",
        followups="I lowered the sensitivity but the battery is empty again after {days} days.|That did not help, the {product} battery is still draining fast.",
    ),
    Topic(
        products="thermostat|smart hub|security camera|smart speaker",
        subjects="{Product} update stuck|Firmware update failed on {product}|{Product} stuck at updating",
        bodies="The firmware update on my {product} has been stuck at the same percentage for hours.|My {product} started an update {ago} and never finished.|The app says the update for the {product} failed.",
        symptoms="the {product} is stuck on a firmware update|the latest update failed on my {product}|my {product} has been updating for hours",
        openers="Sorry the {product} update got stuck.|A stuck update on the {product} can usually be restarted safely.|Thanks for letting us know the {product} update did not finish.",
        fixes="Unplug the {product} for a minute and plug it back in, and the update will start again on its own.|Keep the {product} close to the router during the update, because a weak signal can interrupt the download.|Leave the {product} powered on for about twenty minutes so the update can finish.",
        escalation="If the update fails again, hold the reset button for ten seconds to roll back to the previous firmware, then try once more. We can also push the update from our side if you send us the device serial number.",
        followups="I restarted it and the update is stuck again.|The {product} still shows the update as failed.",
    ),
    Topic(
        products="thermostat",
        subjects="Thermostat shows the wrong temperature|Heating schedule ignored|Thermostat not following schedule|House too cold in the morning",
        bodies="My thermostat reads about three degrees higher than the real room temperature.|The thermostat ignores the schedule I set and keeps the heating on all night.|The house is cold every morning even though the schedule says to start heating at six.|The heating stays on at night even though my schedule turns it down in the evening.|The thermostat switches the heating on at the wrong times.",
        symptoms="the thermostat ignores my heating schedule|the thermostat shows the wrong room temperature|the thermostat keeps the heating on at night|the heating does not follow the thermostat schedule",
        openers="Sorry the thermostat is not keeping the right temperature.|Thanks for the details about the thermostat schedule.|A thermostat that ignores its schedule is annoying, and the fix is usually a setting.",
        fixes="Make sure the thermostat is not mounted near a window, a lamp or a heating vent, since nearby heat changes its reading.|You can correct the reading under Settings and Temperature offset in the app.|Check that Away mode and Eco mode are switched off, because both override the schedule.|Confirm the time zone in the app is correct, since a wrong time zone shifts every schedule.",
        escalation="If the thermostat still ignores the schedule, delete the schedule in the app and create it again, then restart the thermostat. Send us a photo of the schedule screen if it happens again.",
        followups="I checked those settings and the thermostat still ignores the schedule.|That did not help, it was cold again this morning.",
    ),
    Topic(
        products="security camera|video doorbell",
        subjects="Too many motion alerts from {product}|{Product} misses people at the door|Night video blurry on {product}|No motion alerts from {product}",
        bodies="My {product} sends motion alerts all day, even when nobody is there.|The {product} does not record when someone walks up to the door.|The night video from my {product} is blurry and dark.",
        symptoms="the {product} sends motion alerts all day|my {product} misses people walking up to the door|the night video from my {product} is blurry|the {product} records every passing car",
        openers="Sorry the {product} alerts are not working the way you want.|Motion settings on the {product} take a little tuning.|Thanks for describing what the {product} records.",
        fixes="Set a motion zone in the app so the {product} ignores the street and moving trees.|Adjust the motion sensitivity slider in Device settings until alerts match real visitors.|Clean the lens with a soft dry cloth, since dust and rain spots blur the picture at night.|Turn on night vision in the app and avoid pointing the {product} at bright lights.",
        escalation="If the {product} still misses events, send us a short clip from the app and the time it happened, and we will check the motion logs.",
        followups="I changed the settings but the {product} still sends the wrong alerts.|Still not right, it missed a delivery today.",
    ),
    Topic(
        products="robot vacuum",
        subjects="Robot vacuum keeps getting stuck|Vacuum will not return to the dock|Robot vacuum lost its map|Vacuum stops in the middle of cleaning",
        bodies="My robot vacuum gets stuck under the sofa every time it cleans.|The robot vacuum stops in the middle of the room and never goes back to the dock.|The vacuum forgot the map of my apartment {ago}.",
        symptoms="the robot vacuum gets stuck under the furniture|my robot vacuum will not go back to its dock|the robot vacuum lost the map of my home|the robot vacuum stops halfway through cleaning",
        openers="Sorry the robot vacuum keeps getting stuck.|A robot vacuum that will not dock usually needs a small change.|Thanks for the details about the robot vacuum.",
        fixes="Add a no-go zone in the app around the sofa so the robot vacuum avoids it.|Wipe the cliff sensors and the charging contacts with a dry cloth.|Place the dock against a wall with about a foot of free space on each side.|If the map is gone, run one mapping cleaning with all doors open and save the new map.",
        escalation="If it still stops mid-clean, check that the wheels and brushes are free of hair, then restart the robot vacuum. Send us the error code from the app if it appears again.",
        followups="I added the no-go zone and it still gets stuck.|That did not help, the robot vacuum stopped in the hallway again.",
    ),
    Topic(
        products="smart speaker",
        subjects="Smart speaker does not respond|Voice commands not working|Speaker cannot control my lights|Smart speaker keeps mishearing me",
        bodies="My smart speaker does not react when I say the wake word.|The smart speaker answers but cannot control my lights anymore.|Voice commands stopped working on the smart speaker {ago}.",
        symptoms="the smart speaker does not react to voice commands|my smart speaker cannot control the lights anymore|the smart speaker keeps mishearing me|the smart speaker ignores the wake word",
        openers="Sorry the smart speaker is not responding.|Voice control problems on the smart speaker are often about the linked account.|Thanks for the details about the smart speaker.",
        fixes="Check that the microphone is not muted; the light ring turns red when it is.|Open the app and relink your smart home account under Linked services.|Move the smart speaker away from walls and noisy appliances so it hears you clearly.|Restart the smart speaker by unplugging it for ten seconds.",
        escalation="If voice commands still fail, reset the smart speaker from the app and link your accounts again. Let us know which command fails and we will check it on our side.",
        followups="I tried that and the smart speaker still does not respond.|Still not working, it ignores every command.",
    ),
    Topic(
        products="smart bulb",
        subjects="Smart bulb flickers|Bulb shows the wrong color|Smart bulb turns on by itself|Dimming does not work",
        bodies="My smart bulb flickers when it is dimmed.|The smart bulb turns on by itself in the middle of the night.|The colors on my smart bulb look wrong {when}.",
        symptoms="the smart bulb flickers when I dim it|my smart bulb turns on by itself at night|the smart bulb shows the wrong colors|the smart bulb will not dim",
        openers="Sorry the smart bulb is flickering.|A smart bulb that acts on its own is usually following an old routine.|Thanks for telling us about the smart bulb.",
        fixes="Flicker often comes from a wall dimmer, so set the wall switch to full power and dim from the app instead.|Check the app for old routines or schedules that switch the smart bulb on.|Update the bulb firmware in Device settings, which fixed color problems for many customers.",
        escalation="If the smart bulb still flickers at full power, it may be faulty. Send us your order number and we will replace it.",
        followups="I set the switch to full power and the smart bulb still flickers.|That did not help, it turned on by itself again last night.",
    ),
    Topic(
        products=APPS,
        subjects="{Product} crashes on start|{Product} keeps closing|{Product} freezes|Crash after the latest update",
        bodies="The {product} crashes as soon as I open it.|Since the latest update the {product} closes by itself after a few seconds.|The {product} freezes on the loading screen {when}.|Every time I try to open a file, the {product} closes without any error.|The {product} shows an error and shuts down whenever I tap the menu.",
        symptoms="the {product} crashes as soon as I open it|my {product} keeps closing by itself|the {product} freezes on the loading screen|the {product} shuts down when I open a file",
        openers="Sorry the {product} keeps crashing.|Thanks for reporting the crash in the {product}.|A crash on start is frustrating, and clearing old data usually fixes it.",
        fixes="Update the {product} to the latest version, since the last release fixed several crashes.|Restart your phone or computer to clear anything stuck in memory.|Clear the app cache in your device settings; your data is stored in your account and will not be lost.|Reinstall the {product} if it still closes on start.",
        escalation="If the {product} still crashes, send us your device model, operating system version and the app version shown in Settings and About, and we will pass it to the developers.",
        followups="I reinstalled it and the {product} still crashes.|Still crashing, even after the update.",
    ),
    Topic(
        products=APPS,
        subjects="{Product} not syncing|Changes do not sync between devices|Sync stuck in {product}|Data missing on my laptop",
        bodies="Changes I make on my phone do not show up in the {product} on my laptop.|The {product} has said syncing for two days.|Some of my data is missing after I signed in to the {product} on a new device.|What I add on my laptop never appears in the {product} on my phone.",
        symptoms="the {product} does not sync between my phone and my laptop|my changes in the {product} never show up on my other devices|data is missing in the {product} on my new phone|the {product} has been stuck on syncing for days",
        openers="Sorry the {product} is not syncing.|Sync problems in the {product} are usually about the account or the connection.|Thanks for the details about the sync problem.",
        fixes="Check that you are signed in with the same account on both devices; the account email is under Settings.|Pull down on the main screen to start a manual sync.|Make sure background data is allowed for the {product} in your phone settings.|Sign out and sign back in, which restarts the sync from the server copy.",
        escalation="If sync is still stuck, do not delete anything yet. Send us the account email and the time of the last change that synced, and we will check the server side.",
        followups="I signed out and in again, and it still does not sync.|That did not help, my latest changes are still missing.",
    ),
    Topic(
        products=APPS + "|account",
        subjects="Can't log in|Password reset email never arrives|Locked out of my account|Login not working in the {product}",
        bodies="I cannot log in to the {product}; it says my password is wrong.|I asked for a password reset three times but the email never arrived.|My account got locked after too many login attempts.|I forgot my password and the reset link does not work.",
        symptoms="the {product} says my password is wrong|I cannot log in to the {product}|the password reset email for the {product} never arrives|my account in the {product} is locked",
        openers="Sorry you are locked out.|Login problems are usually quick to sort out.|Thanks for letting us know you cannot sign in.",
        fixes="Check your spam or junk folder for the reset email, since it often lands there.|Make sure you use the email address you signed up with; a typo sends the reset to nowhere.|A locked account unlocks by itself after thirty minutes, then you can request a new reset link.|Reset links expire after one hour, so use the newest email you receive.",
        escalation="If the reset email still does not arrive, reply from the address on your account and we will verify it and send a reset link by hand.",
        followups="I checked the spam folder and there is still no reset email.|Still locked out, the reset link does not arrive.",
    ),
    Topic(
        products=APPS + "|account",
        subjects="Lost phone with two-factor codes|Two-factor authentication problem|2FA codes not accepted",
        bodies="I lost my phone and it had the two-factor codes for my account.|The two-factor code from my authenticator app is always rejected.|I changed phones and now I cannot get past the two-factor step.",
        symptoms="I lost the phone with my two-factor codes|the {product} rejects my two-factor code|I cannot get past the two-factor step in the {product}",
        openers="Sorry you cannot get past two-factor authentication.|Losing the phone with your codes is stressful, but the account can be recovered.|Thanks for reaching out about two-factor authentication.",
        fixes="Use one of the backup codes you saved when you turned on two-factor authentication.|If codes are rejected, set your phone clock to automatic time, because the codes depend on the exact time.|After you sign in, turn two-factor authentication off and on again to link your new phone.",
        escalation="If you have no backup codes, we can verify your identity by email. Reply from the address on the account with the date of your last payment and we will reset two-factor authentication.",
        followups="I do not have any backup codes.|I tried that and the code is still rejected.",
    ),
    Topic(
        products=APPS + "|" + DEVICES,
        subjects="No notifications from the {product}|Alerts stopped|Notifications not working|{Product} alerts arrive late",
        bodies="I stopped getting notifications from the {product} {ago}.|Alerts from the {product} arrive minutes late.|The {product} never sends notifications even though they are turned on.",
        symptoms="the {product} stopped sending notifications|alerts from the {product} arrive late|I never get any notifications from the {product}",
        openers="Sorry the notifications are not coming through.|Missing alerts from the {product} usually come from phone settings.|Thanks for letting us know about the notifications.",
        fixes="Check that notifications are allowed for the app in your phone settings.|Turn off battery saver for the app, since it delays or blocks alerts.|In the app, open Notifications and make sure the alert types you want are switched on.|Sign out of the app and back in, which registers your phone for alerts again.",
        escalation="If alerts are still missing, send us the phone model and the time of an alert you expected, and we will check the delivery log.",
        followups="I changed those settings and there are still no notifications.|Still nothing, I missed another alert today.",
    ),
    Topic(
        products=APPS,
        subjects="How do I export my data?|Export to CSV|Download all my data from the {product}",
        bodies="Is there a way to export everything from the {product} to a spreadsheet?|I need a copy of all my data from the {product} before I switch phones.|How can I download my history from the {product} as a CSV file?",
        symptoms="I need to export my data from the {product}|I want a CSV copy of everything in the {product}|I need to download my history from the {product}",
        openers="You can export your data from the {product} at any time.|Exporting from the {product} takes only a minute.|Good question, the {product} has a built-in export.",
        fixes="Open Settings, choose Data and privacy, and select Export data.|Pick CSV if you want to open the file in a spreadsheet, or JSON for a full backup.|The export link is sent to your account email and stays valid for seven days.",
        escalation="If the export email does not arrive within an hour, check the spam folder, then reply here and we will send the file directly.",
        followups="The export email never arrived.|I asked for the export yesterday and still have nothing.",
    ),
    Topic(
        products=APPS,
        subjects="{Product} is very slow|Everything takes ages to load|{Product} lags",
        bodies="The {product} has become very slow {when}.|Every screen in the {product} takes several seconds to load.|Typing in the {product} lags behind my keyboard.",
        symptoms="the {product} has become very slow|the {product} takes ages to load|the {product} lags when I type",
        openers="Sorry the {product} has become slow.|Thanks for telling us the {product} is lagging.|A slow {product} usually has a simple cause.",
        fixes="Check that you have at least a gigabyte of free storage, since the {product} slows down when space runs out.|Close other apps running in the background.|Update to the latest version, which made loading much faster.|Large old projects can slow things down, so archive the ones you no longer need.",
        escalation="If it is still slow, send us the app version and a rough count of your items, and we will check whether your account needs a cleanup on our side.",
        followups="I cleaned up storage and the {product} is still slow.|That did not help, it still takes ages to load.",
    ),
    Topic(
        products=PLANS,
        subjects="Charged twice this month|Double charge on my card|Two payments for the {product}",
        bodies="I was charged {amount} twice for my {product} this month.|My bank statement shows two identical payments for the {product}.|You took the payment for the {product} twice on the same day.|There are two charges of {amount} on my card for the same {product}.",
        symptoms="I was charged twice for my {product}|there are two payments for my {product} on my statement|you took the payment for my {product} twice",
        openers="Sorry about the double charge.|Thanks for spotting the duplicate payment for the {product}.|A double charge should never happen, and we will make it right.",
        fixes="One of the two payments is often a temporary hold that your bank releases within three to five business days.|If both payments are still there after five days, we will refund the duplicate right away.|You can see every real charge under Account and Billing history.",
        escalation="We checked your account and both charges went through, so we have refunded the duplicate {amount}. The money should be back on your card within five business days.",
        followups="It has been a week and both charges are still there.|My bank says both payments went through.",
    ),
    Topic(
        products=PLANS + "|" + SHIPPED,
        subjects="Refund request|I want my money back|Refund for the {product}",
        bodies="I would like a refund for the {product}.|The {product} did not work for me and I want my money back.|Can I get a refund for the {product} I paid {amount} for?|I cancelled my {product} but you still charged me {amount}, please refund it.",
        symptoms="I want a refund for my {product}|I would like my money back for the {product}|I was billed for the {product} after I cancelled it",
        openers="Sorry the {product} did not work out for you.|We can help with a refund for the {product}.|Thanks for asking about a refund.",
        fixes="Refunds are available within thirty days of purchase.|Once we approve the refund, the money goes back to the original payment method within five to ten business days.|For a device, we will email you a free return label, and the refund starts when the package arrives.",
        escalation="We have approved the refund of {amount}. You will get a confirmation email today, and the money should show on your statement within ten business days.",
        followups="Yes, please go ahead with the refund.|I would like the refund, please.",
    ),
    Topic(
        products=PLANS,
        subjects="Cancel my subscription|How do I cancel?|Stop auto-renewal|Cancel the {product}",
        bodies="I want to cancel my {product} before it renews.|How do I stop my {product} from renewing next month?|Please cancel my {product}, I do not use it anymore.|I no longer need my {product}, how do I stop paying for it?",
        symptoms="I want to cancel my {product}|I need to stop my {product} from renewing|I do not want my {product} anymore",
        openers="Sorry to see you go.|You can cancel the {product} at any time.|Thanks for letting us know you want to cancel.",
        fixes="Go to Account, then Subscription, and choose Cancel subscription.|You keep access until the end of the period you already paid for.|If you signed up through the App Store or Google Play, cancel it there instead, because we cannot stop those payments.",
        escalation="We have cancelled the {product} for you, and you will not be charged again. You keep access until the end of the current period.",
        followups="I cannot find the cancel option, can you do it for me?|Please just cancel it for me.",
    ),
    Topic(
        products=PLANS,
        subjects="Change my plan|Upgrade to a bigger plan|Downgrade my subscription|Switch from monthly to annual",
        bodies="I want to switch my {product} to a cheaper plan.|How do I upgrade from the {product} to the Family plan?|Can I change my {product} from monthly to annual billing?",
        symptoms="I want to upgrade my {product}|I would like to switch to a cheaper plan|I want to move my {product} to annual billing",
        openers="You can change your plan at any time.|Happy to help you switch plans.|Thanks for asking about changing the {product}.",
        fixes="Open Account, choose Subscription, and pick Change plan.|When you upgrade, you pay only the difference for the rest of this period.|A downgrade takes effect at the next renewal, so you keep your current features until then.",
        escalation="We have switched the plan for you. The new price shows on your next invoice.",
        followups="I do not see a Change plan button.|Can you change it for me?",
    ),
    Topic(
        products=PLANS,
        subjects="Card declined|Payment failed|Update my payment method|Subscription payment did not go through",
        bodies="My payment for the {product} was declined but my card works everywhere else.|I got an email that the payment for my {product} failed.|How do I change the card used for my {product}?",
        symptoms="my card was declined for the {product}|the payment for my {product} failed|I need to change the card for my {product}",
        openers="Sorry the payment did not go through.|A declined payment is usually a quick fix.|Thanks for letting us know about the payment problem.",
        fixes="Check that the card number, expiry date and billing postcode in Account and Payment methods are current.|Some banks block online subscription payments, so a quick call to the bank often solves it.|You can add a new card under Payment methods and make it the default.|We retry a failed payment after three days, and your access continues in the meantime.",
        escalation="If the new card is also declined, send us the exact error message and we will look at the payment log.",
        followups="I added a new card and it was declined too.|The bank says everything is fine on their side.",
    ),
    Topic(
        products=PLANS + "|" + SHIPPED,
        subjects="Need an invoice|Invoice with company name|VAT invoice for the {product}|Receipt for my purchase",
        bodies="I need an invoice for the {product} with my company name on it.|Can you send me a receipt for the {product} I bought {ago}?|My accountant needs a VAT invoice for the {product}.",
        symptoms="I need an invoice for my {product}|I need a receipt with my company name|my accountant wants a VAT invoice for the {product}",
        openers="Happy to help with the invoice.|You can get an invoice for the {product} in a few clicks.|Thanks for asking about the invoice.",
        fixes="Every invoice can be downloaded as a PDF under Account and Billing history.|Add your company name and VAT number under Billing details before you download it.|Invoices already issued can be regenerated once the billing details are updated.",
        escalation="We have regenerated the invoice with your company details and sent it to your account email.",
        followups="I added the company details but the old invoice still shows my personal name.|Can you send it to me directly?",
    ),
    Topic(
        products="account",
        subjects="Change my email address|Update account email|New email for my account",
        bodies="I want to change the email address on my account.|I have a new email address, how do I update it on my account?|My old email account is closed, can you move my account to a new address?",
        symptoms="I need to change the email on my account|my account should use my new email address|I want to update my login email",
        openers="Happy to help with your email address.|You can change the email on your account yourself.|Thanks for reaching out about your account email.",
        fixes="Open Account, choose Profile and enter the new address.|We send a confirmation link to the new address, and the change takes effect once you click it.|Your password, data and subscription stay the same after the change.",
        escalation="We have changed the email on your account. You will get a confirmation at the new address within a day.",
        followups="I cannot find that option in the app.|The confirmation email never arrived.",
    ),
    Topic(
        products="account",
        subjects="Delete my account|Close my account|Remove all my data",
        bodies="Please delete my account and all my data.|How do I close my account for good?|I no longer use the service and want my account removed.",
        symptoms="I want to delete my account|please close my account and remove my data|I want all my data removed",
        openers="Sorry to see you go.|You can close your account yourself.|Thanks for letting us know you want to close your account.",
        fixes="Cancel any active subscription first so you are not charged again.|Go to Account, then Privacy, and choose Delete account.|Deleting an account removes all data after thirty days and cannot be undone.",
        escalation="We have deleted your account. All data will be removed within thirty days, and you will get a confirmation email.",
        followups="I cannot find that option in the app.|Can you do it for me?",
    ),
    Topic(
        products=PLANS,
        subjects="Promo code not working|Discount not applied|Coupon code invalid",
        bodies="The promo code I got by email says invalid at checkout.|My discount was not applied to the {product}.|I used a coupon but I was charged the full {amount}.",
        symptoms="my promo code does not work|the discount code was not applied|the coupon says invalid at checkout",
        openers="Sorry the promo code did not work.|Thanks for letting us know about the discount.|Promo codes can be picky, so let's check it.",
        fixes="Codes are case sensitive, so type it exactly as it appears in the email.|Most codes are for new subscriptions only and cannot be added to an existing plan.|Each code has an expiry date, which is printed at the bottom of the email.",
        escalation="We have applied the discount to your account by hand, and the difference will be refunded within five business days.",
        followups="I typed it exactly and it still says invalid.|The code is new and has not expired.",
    ),
    Topic(
        products=SHIPPED,
        subjects="Where is my order?|Order {order} not delivered|Tracking not updating|Package late",
        bodies="My {product} was supposed to arrive {days} days ago.|The tracking for order {order} has not changed in a week.|I ordered a {product} and I still have no shipping confirmation.|The tracking says my {product} was delivered, but there is no package at my door.|My order {order} is still not here and the tracking page shows no updates.",
        symptoms="my {product} has not arrived yet|the tracking for my {product} has not changed in days|my package says delivered but it is not here|my order {order} is late",
        openers="Sorry your {product} has not arrived yet.|Thanks for checking on order {order}.|A late package is frustrating, so let's find out where it is.",
        fixes="Tracking sometimes pauses while a package moves between carriers, and it usually updates within two days.|Check the shipping address in your order confirmation for typos.|If the tracking shows delivered but you have no package, check with neighbours and the building mailroom.|Orders ship within two business days, and standard delivery takes three to seven more.",
        escalation="We have opened an investigation with the carrier for order {order}. If the package is not found within three business days, we will send a replacement {product} at no cost.",
        followups="It has been three more days and the package still has not arrived.|The tracking has still not moved.",
    ),
    Topic(
        products=SHIPPED,
        subjects="Wrong item received|Got the wrong product|Order {order} has the wrong item",
        bodies="I ordered a {product} but received something else.|The box for order {order} contained the wrong model.|You sent me two of the same item instead of a {product}.",
        symptoms="I received the wrong item instead of my {product}|the box had a different product than the {product} I ordered|order {order} contained the wrong item",
        openers="Sorry you received the wrong item.|Thanks for telling us about the mix-up with order {order}.|That is our mistake, and we will fix it quickly.",
        fixes="We will send the correct {product} right away at no cost.|A prepaid return label for the wrong item is on its way to your email.|You have thirty days to send the wrong item back, so there is no rush.",
        escalation="The correct {product} shipped today, and the tracking link is in your email.",
        followups="When will the correct {product} arrive?|Do I need to wait for the return first?",
    ),
    Topic(
        products=SHIPPED,
        subjects="Item arrived damaged|Broken {product}|Package was crushed",
        bodies="My {product} arrived with a cracked case.|The box was crushed and the {product} does not turn on.|Order {order} arrived damaged.|The {product} came out of the box with a broken screen.",
        symptoms="my {product} arrived broken|the {product} was damaged in shipping|the package with my {product} was crushed",
        openers="Sorry the {product} arrived damaged.|A broken delivery is disappointing, and we will replace it.|Thanks for letting us know the {product} was damaged.",
        fixes="Please send us a photo of the damage and the box so we can file a claim with the carrier.|We will ship a replacement {product} as soon as we have the photo.|You do not need to return the damaged item unless we ask for it.",
        escalation="The replacement {product} is on its way, and you will get a tracking link by email.",
        followups="I sent the photos, what happens next?|Here are the photos of the box and the {product}.",
    ),
    Topic(
        products=SHIPPED,
        subjects="Change delivery address|Wrong shipping address|Update the address on order {order}",
        bodies="I entered the wrong address for order {order}.|I am moving next week, can you change the delivery address for my {product}?|Please send my {product} to my office instead of my home.",
        symptoms="I need to change the delivery address for order {order}|the shipping address on my order is wrong|I want my {product} delivered to a different address",
        openers="Happy to help with the delivery address.|Thanks for catching the address before delivery.|We can usually change the address if the order has not shipped.",
        fixes="If the order has not shipped yet, reply with the full new address and we will update it.|Once the package is with the carrier, you can change the address from the tracking page.|We cannot change the address of a package that is already out for delivery.",
        escalation="We have updated the address on order {order}, and the new tracking details are in your email.",
        followups="The tracking page does not let me change the address.|The order has not shipped yet, here is the new address.",
    ),
    Topic(
        products=SHIPPED,
        subjects="Return my {product}|How do I return an item?|Return label request",
        bodies="I would like to return the {product} I bought {ago}.|How do I send back my {product}? It is not what I expected.|Can you send me a return label for order {order}?",
        symptoms="I want to return my {product}|I need a return label for the {product}|the {product} is not what I expected and I want to send it back",
        openers="You can return the {product} within thirty days.|Happy to help with the return.|Thanks for letting us know you want to return the {product}.",
        fixes="Start the return under Orders, choose the order, and select Return item.|A prepaid return label will arrive by email within a few minutes.|Pack the {product} in its original box if you still have it, with all cables.|The refund starts as soon as the warehouse receives the package.",
        escalation="We have created the return for you, and the label is in your email.",
        followups="Can you just make the return for me?|I cannot find the Return item button.",
    ),
    Topic(
        products=SHIPPED,
        subjects="Missing part|Something missing from the box|No power cable in the box",
        bodies="The box for my {product} did not include the power adapter.|My {product} arrived without the mounting screws.|Part of order {order} is missing.",
        symptoms="a part is missing from my {product}|the box for my {product} had no power adapter|my {product} came without the mounting screws",
        openers="Sorry something was missing from the box.|Thanks for letting us know a part of the {product} was missing.|A missing part is easy for us to send.",
        fixes="Tell us which part is missing and we will ship it today at no cost.|Some orders ship in two boxes, so check whether a second package is on the way.|The packing list in the box shows everything that should be included.",
        escalation="The missing part for the {product} shipped today. You will get tracking details by email.",
        followups="There is no second package, the part is really missing.|It is the power adapter that is missing.",
    ),
    Topic(
        products=SHIPPED,
        subjects="Cancel my order|Cancel order {order}|Ordered by mistake",
        bodies="Please cancel order {order}, I ordered by mistake.|I want to cancel the {product} I ordered {ago}.|Can I still cancel my order for the {product}?",
        symptoms="I want to cancel order {order}|I ordered the {product} by mistake|please stop my order before it ships",
        openers="We can cancel the order if it has not shipped.|Happy to help with the cancellation.|Thanks for letting us know quickly.",
        fixes="Orders can be cancelled under Orders until they ship, usually within a few hours.|If the {product} already shipped, refuse the delivery or send it back with the free return label.|The refund goes back to your original payment method within five business days.",
        escalation="We have cancelled order {order}, and the refund of {amount} is on its way.",
        followups="I do not see a cancel button anymore.|It has not shipped yet, please cancel it.",
    ),
]

NAMES = (
    "Maria|James|Aisha|Tom|Sofia|Daniel|Priya|Lukas|Emma|Carlos|Yuki|Olivia|Ahmed|Grace|Noah|Elena"
    "|Kwame|Hannah|Mateo|Chloe|Ravi|Ingrid|Omar|Lena|Jack|Fatima|Pierre|Mia|Diego|Nora|Sam|Anna"
)
FILLS = {
    "when": "since yesterday|since the last update|since this morning|since last weekend|since Monday",
    "ago": "yesterday|last week|on Monday|two days ago|earlier this month|last night",
    "amount": "$9.99|$12.99|$24.50|$49.00|$79.99|$119.00|$4.99",
}
GREETINGS = "Hello,|Hi,|Hi there,|Hello support,|Good morning,"
# Shared by every topic, so the topic can only be read from the symptom's own words.
FRAMES = (
    "{c}.|I noticed that {c}.|It looks like {c}.|Unfortunately {c}.|Help, {c}!"
    "|{c}, can you look into it?|As of today, {c}.|Not sure why, but {c}."
)
GENERIC_SUBJECTS = (
    "Problem with my {product}|Question about my {product}|Help needed|Support request|Urgent"
)
# Details to repeat back exactly: the copying that citing a ticket id later relies on.
CONFIRMATIONS = (
    "Please update the phone number on my account to {phone}.=Done. The phone number on your account is now {phone}."
    "|Can you confirm you have my order {order}?=Yes, we have order {order}, and you will get an email as soon as it ships."
    "|Please add {email} as the contact email on my account.=Done. {email} is now the contact email on your account."
    "|My name is misspelled on my account, it should be {full}.=Thanks, we have corrected the name on your account to {full}."
    "|Please send the invoice to {email}.=Done, the invoice is on its way to {email}."
    "|My new delivery address is {street}.=Thanks, we have saved {street} as your delivery address."
)
SURNAMES = (
    "Smith|Garcia|Okafor|Novak|Tanaka|Rossi|Berg|Khan|Dubois|Silva|Murphy|Kowalski|Lee|Haddad"
)
STREETS = "Oak Street|Mill Lane|Harbor Road|Station Avenue|Elm Court|Park Row|Bridge Street"
EXTRAS = (
    "It worked fine until now.|This is the second time this month.|I need this sorted out soon."
    "|Thanks in advance.|I am not very technical, so please keep it simple.|This is getting really annoying."
)
ASKS = "Can you help?|Any ideas?|What should I do?|Please advise.|How do I fix this?|Thanks for your help."
SIGNOFFS = "Thanks,|Thank you,|Regards,|Cheers,|Best,"
TICKET_LINES = (
    "My ticket number is {t}.|This is about ticket #{t}.|I already opened ticket {t} but have no answer yet."
    "|Ticket: {t}.|Following up on ticket {t}."
)
CLOSERS = (
    "If that does not help, reply here and we will look into it further.|Let us know how it goes."
    "|If the problem comes back, just reply to this message.|Reply here if you have any other questions."
    "|We are here if you need anything else.|Hope that helps."
)
THANKS = (
    "That worked, thanks!|Thanks, it works now.|Perfect, that fixed it.|All good now, thank you."
)
GLAD = (
    "Glad to hear it is working again.|Great, thanks for letting us know.|Happy to hear that."
    "|Good to hear it is sorted."
)
SYSTEMS = (
    "You are a helpful customer support agent. Answer clearly and briefly."
    "|You are the support assistant for a smart home company. Be friendly and practical."
    "|You answer customer support tickets. Keep replies short and helpful."
    "|You are a support agent for an online store. Help customers with orders, billing and devices."
    "|You are a patient, helpful assistant."
)
MATH_ASKS = "What is {e}?|Quick question: what is {e}?|Can you tell me what {e} is?|How much is {e}?|Calculate {e}."
OP_WORDS = {"+": "plus", "-": "minus", "*": "times"}


def pick(rng: random.Random, options: str) -> str:
    """One of the "|"-separated options."""
    return rng.choice(options.split("|"))


def customer_message(rng: random.Random, topic: Topic, fill: dict, ticket: str | None) -> str:
    """A ticket-like message: usually a subject line and a body, sometimes signed."""
    if rng.random() < 0.5:
        first = pick(rng, topic.bodies)
    else:
        first = pick(rng, FRAMES).format(c=pick(rng, topic.symptoms))
        first = first[0].upper() + first[1:]
    body = [first.format(**fill)]
    if rng.random() < 0.4:
        body.append(pick(rng, EXTRAS))
    subjects = topic.subjects if rng.random() < 0.75 else GENERIC_SUBJECTS
    subject = pick(rng, subjects).format(**fill)
    if ticket and rng.random() < 0.4:
        subject += rng.choice([f" (ticket #{ticket})", f" [{ticket}]", f" - {ticket}"])
    elif ticket:
        body.insert(rng.randrange(2), pick(rng, TICKET_LINES).format(t=ticket))
    body.append(pick(rng, ASKS))
    text = " ".join(body)
    if rng.random() < 0.4:
        text = pick(rng, GREETINGS) + "\n" + text
    if rng.random() < 0.8:  # most messages arrive as tickets with a subject line
        text = subject + "\n" + text
    if rng.random() < 0.45:
        name = pick(rng, NAMES)
        text += rng.choice([f"\n\n{pick(rng, SIGNOFFS)}\n{name}", f"\n{name}", f"\n- {name}"])
    return text


def agent_reply(
    rng: random.Random, topic: Topic, fill: dict, ticket: str | None, asked: str
) -> str:
    """Plain prose: an opener, two or three pieces of advice in order, usually a closing line.

    Order numbers and amounts the customer gave are often repeated back, which is polite and
    teaches the model to copy from the question (a ticket id is cited far less often).
    """
    fixes = topic.fixes.split("|")
    chosen = sorted(rng.sample(range(len(fixes)), k=min(len(fixes), rng.choice([2, 2, 3]))))
    parts = [pick(rng, topic.openers)] + [fixes[i] for i in chosen]
    if fill["order"] in asked and rng.random() < 0.5:
        parts.insert(0, pick(rng, "I have checked order {order}.|I looked up order {order}."))
    elif fill["amount"] in asked and rng.random() < 0.5:
        parts.insert(0, "I can see the {amount} charge on your account.")
    if rng.random() < 0.85:
        parts.append(pick(rng, CLOSERS))
    text = " ".join(parts).format(**fill)
    if ticket and rng.random() < 0.125:
        if rng.random() < 0.6:
            return f"About ticket {ticket}: {text}"
        return f"{text} I have added these notes to ticket {ticket}."
    return text


def generic_name(product: str) -> str:
    """What a reply calls the product when the customer did not name it."""
    if product in APPS.split("|"):
        return "app"
    return "subscription" if product in PLANS.split("|") else "device"


def support_conversation(rng: random.Random) -> list[dict]:
    """One support exchange, sometimes with a follow-up turn."""
    topic = rng.choice(TOPICS)
    product = pick(rng, topic.products)
    fill = {key: pick(rng, options) for key, options in FILLS.items()}
    fill |= {"product": product, "Product": product[0].upper() + product[1:]}
    fill |= {"order": f"#{rng.randint(10000, 99999)}", "days": rng.randint(2, 9)}
    ticket = f"T-{rng.randint(1000, 9999)}" if rng.random() < 0.3 else None
    message = customer_message(rng, topic, fill, ticket)
    if product.lower() not in message.lower():  # never name a product the customer did not
        general = generic_name(product)
        fill |= {"product": general, "Product": general.capitalize()}
    messages = [
        {"role": "user", "content": message},
        {"role": "assistant", "content": agent_reply(rng, topic, fill, ticket, message)},
    ]
    if rng.random() < 0.15:
        if rng.random() < 0.35:
            follow, answer = pick(rng, THANKS), pick(rng, GLAD)
        else:
            follow, answer = pick(rng, topic.followups), pick(rng, topic.escalation)
        messages.append({"role": "user", "content": follow.format(**fill)})
        messages.append({"role": "assistant", "content": answer.format(**fill)})
    return messages


def arithmetic_conversation(rng: random.Random) -> list[dict]:
    """A small sum, difference or product; the reply states the equation and the result."""
    op = rng.choice("+-*")
    # Mostly one-digit numbers: a table small enough for a tiny model to learn, so a numeric
    # reward later finds some correct answers to reinforce.
    top = 9 if op == "*" or rng.random() < 0.7 else 20
    a, b = rng.randint(1, top), rng.randint(1, top)
    a, b = (b, a) if op == "-" and b > a else (a, b)
    result = {"+": a + b, "-": a - b, "*": a * b}[op]
    spoken = f"{a} {OP_WORDS[op]} {b}" if rng.random() < 0.3 else f"{a} {op} {b}"
    question = pick(rng, MATH_ASKS).format(e=spoken)
    return [
        {"role": "user", "content": question},
        {"role": "assistant", "content": f"{a} {op} {b} = {result}."},
    ]


def confirmation_conversation(rng: random.Random) -> list[dict]:
    """A customer gives a detail (phone, email, name, address, order) that the reply repeats."""
    name, surname = pick(rng, NAMES), pick(rng, SURNAMES)
    fill = {
        "phone": f"555-{rng.randint(1000, 9999)}",
        "order": f"#{rng.randint(10000, 99999)}",
        "email": f"{name.lower()}.{surname.lower()}@example.com",
        "full": f"{name} {surname}",
        "street": f"{rng.randint(1, 200)} {pick(rng, STREETS)}",
    }
    question, answer = pick(rng, CONFIRMATIONS).split("=")
    return [
        {"role": "user", "content": question.format(**fill)},
        {"role": "assistant", "content": answer.format(**fill)},
    ]


def build_corpus(n: int, seed: int = 0) -> list[list[dict]]:
    """`n` conversations (lists of chat messages), the same for the same seed."""
    rng = random.Random(seed)
    corpus = []
    for _ in range(n):
        kind = rng.random()
        is_math = kind < 0.05
        if is_math:
            messages = arithmetic_conversation(rng)
        elif kind < 0.1:
            messages = confirmation_conversation(rng)
        else:
            messages = support_conversation(rng)
        if rng.random() < 0.2:
            system = "You are a helpful assistant." if is_math else pick(rng, SYSTEMS)
            messages.insert(0, {"role": "system", "content": system})
        corpus.append(messages)
    return corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5, help="how many conversations to print")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    args = parser.parse_args()
    for messages in build_corpus(args.n, args.seed):
        print(json.dumps(messages, indent=1))


if __name__ == "__main__":
    main()
