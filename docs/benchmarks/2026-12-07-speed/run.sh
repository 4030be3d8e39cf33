#!/bin/bash
# Before (888e0d0) and after (this session's build), alternating, same machine, same hour.
cd /tmp
# Release builds of 888e0d0 (before) and 091476e (after).
B=/tmp/before/flotilla; A=/tmp/after/flotilla
for i in 1 2; do
  $B bench member --runtime netns --nodes 4 --pods 200 --json > /tmp/speed/member-before-$i.json 2>/tmp/speed/member-before-$i.txt
  $A bench member --runtime netns --nodes 4 --pods 200 --json > /tmp/speed/member-after-$i.json 2>/tmp/speed/member-after-$i.txt
done
$B bench peering --pods 200 --json > /tmp/speed/peering-before.json 2>/tmp/speed/peering-before.txt
$A bench peering --pods 200 --json > /tmp/speed/peering-after.json 2>/tmp/speed/peering-after.txt
$B bench fabric --members 2 --json > /tmp/speed/fabric-before-2.json 2>/tmp/speed/fabric-before-2.txt
$A bench fabric --members 2 --json > /tmp/speed/fabric-after-2.json 2>/tmp/speed/fabric-after-2.txt
$B bench propagation --templates 600 --members 2 --rate 20 --json > /tmp/speed/idle-before.json 2>/tmp/speed/idle-before.txt
$A bench propagation --templates 600 --members 2 --rate 20 --json > /tmp/speed/idle-after.json 2>/tmp/speed/idle-after.txt
echo done > /tmp/speed/DONE
