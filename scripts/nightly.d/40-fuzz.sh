# Every bolero harness for 60 s with the random engine (scripts/fuzz.sh;
# the default tier replays the corpus and runs 1 s each in step 10).
scripts/fuzz.sh 60
