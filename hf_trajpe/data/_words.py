"""Word lists shared by the generators: enough variety that a tiny model cannot memorise the texts."""

from __future__ import annotations

NOUNS = tuple("""
apple anchor arrow badge basket battery beacon bell blanket board bottle bridge brush bucket button
cabin cable camera candle canvas carpet castle chain chair chart circle clock cloud coin compass
copper cottage crystal cup curtain desk diagram drum engine envelope fabric feather fence field
filter flag flask forest fountain frame garden gate glove grain hammer harbor helmet hinge island
jacket jar kettle key ladder lamp lantern leaf lens letter lever library magnet map marble meadow
mirror motor needle net notebook orchard oven paddle paint panel parcel pebble pencil piano pillow
pipe planet plate pocket pump puzzle quilt radio rail ribbon ring river rocket rope saddle sail
scale screen shelf shield signal silver sketch sled spoon spring stamp statue stone stove string
sugar switch table tablet teapot ticket timber tower track tractor trumpet tunnel valve vase wagon
wallet whistle window wire wheel yarn
""".split())

ADJECTIVES = tuple("""
amber ancient bitter blue brave bright broken calm careful cheap clever cold crisp curious damp dark
deep dusty eager early empty faint fast fierce flat fresh gentle giant golden green grey hidden
hollow humble icy idle jolly keen large lazy light little loud lucky mellow narrow neat noble odd
old orange pale patient plain polite proud purple quick quiet rapid rare red rough round rusty
sharp shiny short silent simple slow small smooth soft solid sour spare steady sticky strange
strong sturdy sweet swift tall tender thick thin tidy tiny tired warm wet white wide wild wise
wooden young
""".split())

VERBS = tuple("""
adjust align assemble attach balance bend boil brush build carry check clean clear close collect
connect count cover cut decorate deliver draw dry empty fill fix fold gather glue heat hold inspect
join label lift load lock lower measure melt mix move open pack paint place polish pour press pull
push repair replace rinse roll rotate sand scrub seal secure shake sharpen slide sort spread stack
stir store tighten trim turn unpack wash weigh wipe wrap
""".split())

NAMES = tuple("""
Ada Alice Amir Anna Ben Bruno Carla Chen Dara David Elena Emil Farah Felix Grace Hana Hugo Ines
Ivan Jonas Julia Kai Karim Lena Leo Lina Luca Maya Mei Milo Nadia Nico Nora Omar Oscar Paula
Pedro Priya Quinn Rafael Rosa Sam Sara Soren Tara Theo Uma Vera Victor Wen Yara Yusuf Zoe
""".split())

PLACES = tuple("""
Aldmoor Brackwell Cindervale Dunmore Eastholm Fernbridge Glenrock Harrowby Ivybank Juniper
Kestrel Larkhill Millbrook Northwick Oakhurst Pinecrest Quarrydale Ravensfield Stonebury
Thornhill Upperton Valemont Westfold Yarrowdale
""".split())

SERVICES = tuple("""
auth billing cache crawler gateway indexer mailer metrics planner queue render scheduler search
storage sync uploader worker
""".split())

EVENTS = tuple("""
batch_processed checkpoint_saved job_started job_finished heartbeat backup_done request_served
snapshot_taken report_sent cache_flushed index_rebuilt sync_complete
""".split())

UNITS = tuple("""
boxes crates parcels tickets orders visitors samples pages repairs deliveries calls trees
""".split())

DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")
SEASONS = ("spring", "summer", "autumn", "winter")
